"""Backup and restore in the store (docs/backup.md): read the tables that hold the control plane's desired state into
one document in one transaction, and write them into an empty store in one transaction.

Desired state is what someone asked for and nothing else can rebuild: who exists and may do what, which workflows
should run with which values, their endpoints' IDs, keys, tokens, secrets and models. What the running cluster
rebuilds by itself (nodes, placements, copies, load) or what is history rather than state (the audit chain) is
left out; `LEFT_OUT` says why for each, and tests/server/store/test_backup.py fails on a table in neither."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from berth.contracts import (
    BackupApiKey,
    BackupApiToken,
    BackupEndpoint,
    BackupEndpointToken,
    BackupGroup,
    BackupMembership,
    BackupModel,
    BackupModelUse,
    BackupPart,
    BackupPolicy,
    BackupRevision,
    BackupSecret,
    BackupTables,
    BackupTokenCutoff,
    BackupUser,
    BackupWorkflow,
)
from berth.errors import ConflictError
from server.store.database import Store
from server.store.tables import (
    ApiKeyRow,
    ApiTokenRow,
    Base,
    EndpointRow,
    EndpointTokenRow,
    GroupRow,
    MembershipRow,
    ModelRow,
    ModelUseRow,
    PolicyRow,
    RevisionRow,
    SecretRow,
    TokenCutoffRow,
    UserRow,
    WorkflowRow,
)

# The tables in the document, each with its record (berth/contracts/backup.py), in the order a restore writes them.
BACKED_UP: tuple[tuple[str, type[Base], type[BackupPart]], ...] = (
    ("users", UserRow, BackupUser),
    ("groups", GroupRow, BackupGroup),
    ("memberships", MembershipRow, BackupMembership),
    ("workflows", WorkflowRow, BackupWorkflow),
    ("workflow_revisions", RevisionRow, BackupRevision),
    ("endpoints", EndpointRow, BackupEndpoint),
    ("secrets", SecretRow, BackupSecret),
    # Revocations and cutoffs must outlive a restore: a token revoked before it must not work after it.
    ("api_tokens", ApiTokenRow, BackupApiToken),
    ("token_cutoffs", TokenCutoffRow, BackupTokenCutoff),
    ("endpoint_tokens", EndpointTokenRow, BackupEndpointToken),
    ("api_keys", ApiKeyRow, BackupApiKey),
    ("models", ModelRow, BackupModel),
    # Which workflow serves which model: kept so that a model in use is not removed before its pool is back.
    ("model_uses", ModelUseRow, BackupModelUse),
    # Policies are desired state an administrator set: a restored cluster keeps its allow-lists and quotas.
    ("policies", PolicyRow, BackupPolicy),
)

LEFT_OUT = {
    "nodes": "observed, not asked for: each node agent registers its inventory again with its next heartbeat",
    "allocations": "placement: the restored pools place their copies again",
    "ports": "placement: the restored pools place their copies again",
    "reservations": "placement: the restored pools place their copies again",
    "replicas": "copies publish themselves when they are ready again",
    "load_reports": "the autoscaler's last minutes of load, stale by the time a restore runs",
    "copy_outcomes": "a rollout's last hour of copy health, stale by the time a restore runs",
    "store_locks": "leases of the processes that ran, none of which runs any more",
    "audit_batches": "the audit chain is append-only, verified history, not desired state: keep the old store "
                     "(or `berth audit list -o json`) as its archive; the restored stack starts a chain of its own",
    "audit_tallies": "derived from the audit batches",
    "ready_copy_samples": "an endpoint's last hours of ready copies, stale by the time a restore runs",
    "events": "the cluster's event stream is history, not desired state, and kept only for its retention period: "
              "`berth events -o json` before a backup is its archive; the restored stack records its own",
    "copy_scrapes": "how fresh each copy's figures were at the proxies in the last minutes, stale by the time a "
                    "restore runs",
    "copy_spans": "usage history (GPU-seconds), not desired state: like the audit chain, the old store is its archive "
                  "(`berth usage -o csv` exports it); the restored pools' copies open spans of their own",
    "usage_budgets": "not in backup format 1 (adding a table is the format's next version): list them before "
                     "(`berth usage budget list -o json`) and set them again after a restore",
    "usage_alerts": "which budgets were announced exceeded in their period: history, not desired state",
    "mig_slices": "not in backup format 1 (adding a table is the format's next version), and slices of nodes that are "
                  "not backed up either: list them before (`berth node mig list NODE -o json`) and create them again "
                  "after a restore, once the nodes have joined",
}

# Rows a freshly started control plane already has — its administrator, the records of the token it was given —
# are replaced by the document's; anything in these tables means the store is in use, and a restore is refused.
MUST_BE_EMPTY: tuple[tuple[str, Any], ...] = (
    ("workflows", WorkflowRow.id), ("endpoints", EndpointRow.id), ("secrets", SecretRow.ref),
    ("API keys", ApiKeyRow.id), ("models", ModelRow.name))
_MERGED = {"users", "groups", "memberships", "api_tokens", "token_cutoffs"}


def export_tables(store: Store) -> BackupTables:
    """Every backed-up table's rows in one transaction (one consistent point in time), ordered by primary key."""
    with store.session() as s:
        tables = {name: [part.model_validate(_columns(row)) for row in s.scalars(
                      select(row_type).order_by(*row_type.__mapper__.primary_key))]
                  for name, row_type, part in BACKED_UP}
    return BackupTables.model_validate(tables)


def import_tables(store: Store, tables: BackupTables) -> dict[str, int]:
    """Write the document's rows into `store` in one transaction, under the placement lock (a second restore, or a
    placement, waits for it): all of them or, on a refusal, none. The rows written per table."""
    written: dict[str, int] = {}
    table = "first"
    try:
        with store.placements.transaction() as s:
            refuse_in_use(s)
            for table, row_type, _part in BACKED_UP:
                rows = [row_type(**_restored(table, part.model_dump())) for part in getattr(tables, table)]
                if table in _MERGED:
                    for row in rows:
                        s.merge(row)
                else:
                    s.add_all(rows)
                s.flush()  # a duplicate is found here, named by the table it is in
                written[table] = len(rows)
    except IntegrityError:
        raise ConflictError(f"The backup holds one {table} row twice (or one the store gained meanwhile); "
                            "nothing was restored.") from None
    return written


def refuse_in_use_now(store: Store) -> None:
    """refuse_in_use on its own, before a restore reaches Temporal (its import checks again, in its transaction)."""
    with store.session() as s:
        refuse_in_use(s)


def refuse_in_use(session: Session) -> None:
    """Refuse, in one line, a store that holds what a user made: a restore never overwrites a control plane in use."""
    for what, key in MUST_BE_EMPTY:
        found = session.scalars(select(key).limit(1)).first()
        if found is not None:
            raise ConflictError(f"This control plane already holds {what} (e.g. '{found}'); restore only into an "
                                "empty one (a fresh state dir or database).")


def _columns(row: Base) -> dict[str, Any]:
    return {attribute.key: getattr(row, attribute.key) for attribute in row.__mapper__.column_attrs}


def _restored(table: str, values: dict[str, Any]) -> dict[str, Any]:
    """A row's columns as a restore writes them: an endpoint's service address is dropped, the process that listened
    there being gone; the endpoint's service sets it again when it is up (until then the proxy answers 503)."""
    if table == "endpoints":
        return {**values, "service_url": None}
    return values
