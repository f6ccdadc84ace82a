"""The control plane's store: identity, workflows, endpoints, replicas and nodes; reservations in
`store.placements` (server/store/placement.py), load reports in `store.load` (server/store/load_reports.py), the audit
chain in `store.audit` (server/store/audit.py), a workflow's revisions in `store.revisions` (server/store/revisions.py),
the endpoint tokens minted in `store.endpoint_tokens` (server/store/endpoint_tokens.py), the cluster's events in
`store.events` (server/store/events.py), usage and its budgets in
`store.usage` and `store.budgets` (server/store/usage.py, server/store/usage_budgets.py).

Synchronous SQLAlchemy; the API calls it from a thread pool. The schema is migrated to its head on open
(server/store/schema.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import create_engine, delete, event, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from berth.contracts import NodeHolding
from berth.errors import ConflictError, NotFoundError, UserInputError
from berth.security import Cipher, Identity
from server import scheduler
from server.gpu_health import SKIP_NONE, GpuHealthRule, keep_known
from server.store import copy_spans, fencing, placement_view, schema
from server.store.audit import AuditChain
from server.store.copy_outcomes import CopyOutcomeStore
from server.store.copy_scrapes import CopyScrapes
from server.store.endpoint_history import EndpointHistoryStore
from server.store.endpoint_tokens import EndpointTokens
from server.store.events import EventLog
from server.store.load_reports import LoadReports
from server.store.placement import Placements, upsert_replica_row
from server.store.revisions import Revisions
from server.store.tables import EndpointRow, GroupRow, MembershipRow, NodeRow, ReplicaRow, UserRow, WorkflowRow
from server.store.usage import UsageStore
from server.store.usage_budgets import UsageBudgets

NODE_PORTS = 100


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """A published copy as the replicas table holds it (ReplicaRow's columns), read without the ORM: the routes table
    reads every one each second for each endpoint proxy, and loading an ORM row cost ~19 us (800 copies: most of the
    API's CPU for that table, docs/performance.md "The routes table")."""

    copy_id: str
    endpoint_id: str
    workflow_id: str
    url: str
    ready: bool
    draining: bool
    updated_at: float
    revision: int


# The table's own columns (Core), not the mapped class's: a select of these skips the ORM's loading of each row.
_REPLICAS = ReplicaRow.__table__
_REPLICA_COLUMNS = tuple(_REPLICAS.c[column.name] for column in fields(ReplicaRecord))


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_REPORTED_DIGESTS = 10_000


def cached_digests(reported: object) -> list[str]:
    """The model digests a node reports its cache holds: 64-hex strings only, a bounded number."""
    if not isinstance(reported, list):
        return []
    return [d for d in reported[:MAX_REPORTED_DIGESTS] if isinstance(d, str) and DIGEST.fullmatch(d)]


class Store:
    def __init__(self, url: str, cipher: Cipher, node_offline_after_s: float = 60.0,
                 policy: scheduler.Policy = scheduler.Policy.PACK, gpu_health: GpuHealthRule = SKIP_NONE) -> None:
        self.engine = make_engine(url)
        schema.upgrade_to_head(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.load = LoadReports(self.session)
        self.outcomes = CopyOutcomeStore(self.session)  # a rollout's split and its copies' health
        self.scrapes = CopyScrapes(self.session)  # how fresh each copy's figures are at the proxies (explain)
        self.audit = AuditChain(self.session)
        self.history = EndpointHistoryStore(self.session)  # an endpoint's recent minutes (the console's chart)
        self.endpoint_tokens = EndpointTokens(self.session)  # their ids, never the tokens; revoked ones
        self.placements = Placements(self.session, node_offline_after_s, policy, gpu_health)
        self.cipher = cipher
        self.revisions = Revisions(self.session, cipher)
        self.events = EventLog(self.session)  # history: written by server/events.py `record`, in no backup
        self.usage = UsageStore(self.session)  # GPU-seconds from the copy spans, requests from the audit tallies
        self.budgets = UsageBudgets(self.session, self.usage)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    # --- identity -------------------------------------------------------------------------------
    def ensure_user(self, name: str, org: str, groups: list[str], admin: bool = False) -> Identity:
        with self.session() as s:
            if s.get(UserRow, name) is None:
                s.add(UserRow(name=name, org=org, admin=admin, created_at=time.time()))
            for group in groups:
                if s.get(GroupRow, group) is None:
                    s.add(GroupRow(name=group, org=org))
                if s.get(MembershipRow, (name, group)) is None:
                    s.add(MembershipRow(user=name, group=group))
        return self.identity(name)

    def create_user(self, name: str, org: str, groups: list[str], admin: bool = False) -> Identity:
        """A new user in `org`, a member of `groups` (created in `org` when missing)."""
        with self.session() as s:
            if s.get(UserRow, name) is not None:
                raise ConflictError(f"User '{name}' already exists.")
            for group in groups:
                row = s.get(GroupRow, group)
                if row is not None and row.org != org:
                    raise UserInputError(f"Group '{group}' belongs to organization '{row.org}', not '{org}'.")
        return self.ensure_user(name, org, groups, admin)

    def users(self) -> list[Identity]:
        with self.session() as s:
            names = list(s.scalars(select(UserRow.name).order_by(UserRow.name)).all())
        return [self.identity(name) for name in names]

    def create_group(self, name: str, org: str) -> None:
        with self.session() as s:
            if s.get(GroupRow, name) is not None:
                raise ConflictError(f"Group '{name}' already exists.")
            s.add(GroupRow(name=name, org=org))

    def add_member(self, group: str, user: str) -> Identity:
        with self.session() as s:
            group_row = s.get(GroupRow, group)
            if group_row is None:
                raise NotFoundError(f"No group named '{group}'. Create it with `berth group create {group}`.")
            user_row = s.get(UserRow, user)
            if user_row is None:
                raise NotFoundError(f"No user named '{user}'. Create it with `berth user create {user}`.")
            if user_row.org != group_row.org:
                raise UserInputError(f"User '{user}' is in organization '{user_row.org}'; group '{group}' "
                                     f"is in '{group_row.org}'.")
            if s.get(MembershipRow, (user, group)) is None:
                s.add(MembershipRow(user=user, group=group))
        return self.identity(user)

    def identity(self, name: str) -> Identity:
        with self.session() as s:
            user = s.get(UserRow, name)
            if user is None:
                raise NotFoundError(f"No user named '{name}'. Create it with `berth user create {name}`.")
            groups = s.scalars(select(MembershipRow.group).where(MembershipRow.user == name)).all()
            return Identity(user=user.name, groups=tuple(sorted(groups)), org=user.org, admin=user.admin)

    # --- workflows ------------------------------------------------------------------------------
    def add_workflow(self, row: WorkflowRow, definition: dict[str, Any], endpoint: EndpointRow) -> None:
        row.definition = self.cipher.encrypt_json(definition)
        try:
            with self.session() as s:
                s.add(row)
                s.add(endpoint)
        except IntegrityError:
            # Two starts that chose one name at once: the submission's check passed for both.
            raise name_taken(row.id) from None

    def workflow(self, workflow_id: str) -> WorkflowRow:
        with self.session() as s:
            row = s.get(WorkflowRow, workflow_id)
            if row is None:
                raise NotFoundError(
                    f"No workflow with ID '{workflow_id}'. Run `berth workflow list` to see your workflows."
                )
            return row

    def workflow_definition(self, row: WorkflowRow) -> dict[str, Any]:
        value = self.cipher.decrypt_json(row.definition)
        assert isinstance(value, dict)
        return value

    def workflows(self, owner: str | None = None) -> list[WorkflowRow]:
        with self.session() as s:
            query = select(WorkflowRow).order_by(WorkflowRow.created_at.desc())
            if owner is not None:
                query = query.where(WorkflowRow.owner == owner)
            return list(s.scalars(query).all())

    def mark_stop_requested(self, workflow_id: str) -> None:
        with self.session() as s:
            row = s.get(WorkflowRow, workflow_id)
            if row is not None:
                row.stop_requested = True

    # --- endpoints and replicas -----------------------------------------------------------------
    def endpoints(self) -> list[EndpointRow]:
        with self.session() as s:
            return list(s.scalars(select(EndpointRow).order_by(EndpointRow.created_at)).all())

    def endpoint(self, endpoint_id: str) -> EndpointRow:
        with self.session() as s:
            row = s.get(EndpointRow, endpoint_id)
            if row is None:
                raise NotFoundError(
                    f"No endpoint with ID '{endpoint_id}'. Run `berth endpoint list` to see the endpoints."
                )
            return row

    def set_endpoint_service(self, endpoint_id: str, service: str, url: str | None) -> None:
        with self.session() as s:
            row = s.get(EndpointRow, endpoint_id)
            if row is None:
                raise NotFoundError(f"No endpoint with ID '{endpoint_id}'.")
            row.service = service
            row.service_url = url

    def note_token_lapse(self, endpoint_id: str, expires_at: float) -> None:
        with self.session() as s:
            row = s.get(EndpointRow, endpoint_id)
            if row is None:
                raise NotFoundError(f"No endpoint with ID '{endpoint_id}'.")
            row.annotations = {**(row.annotations or {}), "token_lapses_at": expires_at}

    def note_scaling(self, endpoint_id: str, explanation: dict[str, Any], every_s: float) -> bool:
        """Keep the autoscaler's latest explanation in the endpoint's annotations["scaling"]; written only
        when its decision, reason or size changed or `every_s` passed since the last write (a tick a second
        must not cost a write a second). Whether it was written."""
        with self.session() as s:
            row = s.get(EndpointRow, endpoint_id)
            if row is None:
                raise NotFoundError(f"No endpoint with ID '{endpoint_id}'.")
            kept = (row.annotations or {}).get("scaling") or {}
            same = all(kept.get(k) == explanation.get(k) for k in ("decision", "reason", "desired"))
            if same and float(explanation.get("at", 0)) - float(kept.get("at", 0)) < every_s:
                return False
            row.annotations = {**(row.annotations or {}), "scaling": explanation}
            return True

    def remove_endpoint(self, endpoint_id: str) -> None:
        with self.session() as s:
            s.execute(delete(ReplicaRow).where(ReplicaRow.endpoint_id == endpoint_id))
            s.execute(delete(EndpointRow).where(EndpointRow.id == endpoint_id))
            self.load.forget(s, endpoint_id)
            self.outcomes.forget(s, endpoint_id)
            self.history.forget(s, endpoint_id)

    def replicas(self, endpoint_id: str | None = None) -> list[ReplicaRecord]:
        with self.session() as s:
            query = select(*_REPLICA_COLUMNS)
            if endpoint_id is not None:
                query = query.where(_REPLICAS.c.endpoint_id == endpoint_id)
            return [ReplicaRecord(*row) for row in s.connection().execute(query)]

    def upsert_replica(self, workflow_id: str, endpoint_id: str, copy_id: str, url: str, ready: bool,
                       draining: bool = False) -> None:
        """Write a copy's record whether or not it holds a placement (the API publishes with
        `placements.publish`, which refuses a released copy)."""
        with self.session() as s:
            upsert_replica_row(s, workflow_id, endpoint_id, copy_id, url, ready, draining)

    def set_replica_ready(self, copy_id: str, ready: bool) -> None:
        """Route to a published copy or not; a copy not (or no longer) published stays unpublished."""
        with self.session() as s:
            row = s.get(ReplicaRow, copy_id)
            if row is not None:
                row.ready, row.updated_at = ready, time.time()
                if ready:
                    copy_spans.ready(s, copy_id, self.placements.clock())

    def drain_replica(self, copy_id: str) -> None:
        """Mark a copy draining: proxies stop choosing it; it stays listed until it is unpublished."""
        with self.session() as s:
            row = s.get(ReplicaRow, copy_id)
            if row is not None:
                row.draining, row.updated_at = True, time.time()

    def remove_replica(self, copy_id: str) -> None:
        with self.session() as s:
            s.execute(delete(ReplicaRow).where(ReplicaRow.copy_id == copy_id))

    # --- nodes ----------------------------------------------------------------------------------
    def heartbeat_node(self, node_id: str, inventory: dict[str, Any], port_start: int,
                       held: list[NodeHolding] | None = None) -> NodeRow:
        """Record a node's inventory; with `held` (what its live rank processes hold), reconcile fencing
        in the same transaction (see server/store/fencing.py), under the placement lock."""
        now = time.time()
        with self.placements.transaction() if held is not None else self.session() as s:
            row = s.get(NodeRow, node_id)
            # A reading the heartbeat does not know keeps the last known one (server/gpu_health.py).
            gpus = keep_known(row.gpus if row is not None else None, inventory.get("gpus", []))
            placed_on = {"gpus": gpus, "taints": inventory.get("taints", []), "volumes": inventory.get("volumes", []),
                         "labels": inventory.get("labels", {})}  # its site and failure domain (berth/sites.py)
            if "models" in inventory:  # an agent from before the model registry reports none: kept None
                placed_on["models"] = cached_digests(inventory["models"])
            # What placement reads changed: every API process's view re-reads this node (a heartbeat that only says
            # "alive" moves last_heartbeat alone, which no view holds, and takes no placement lock). The lock's row
            # before the node's row, as a reservation takes them.
            # A GPU's readings and free memory move at every heartbeat of a real GPU: only their verdict is read.
            facts = self.placements.gpu_health.placement_facts
            generation = None
            if row is None or facts(row.gpus) != facts(gpus) or any(
                    getattr(row, name) != value for name, value in placed_on.items() if name != "gpus"):
                generation = placement_view.take(s)
            if row is None:
                row = NodeRow(id=node_id, last_heartbeat=now, port_start=port_start,
                              port_end=port_start + NODE_PORTS)
                s.add(row)
            for name, value in placed_on.items():
                setattr(row, name, value)
            if generation is not None:
                row.generation = generation
            row.address = inventory["address"]
            row.engine = inventory["engine"]
            row.cpus = int(inventory.get("cpus", 0))
            row.memory_gb = float(inventory.get("memory_gb", 0))
            # A leaving agent's node is offline from now on (node_ready): as if its heartbeats had stopped long ago.
            row.last_heartbeat = 0.0 if inventory.get("leaving") else now
            row.port_start, row.port_end = port_start, port_start + NODE_PORTS
            if held is not None and fencing.reconcile(s, node_id, held):
                placement_view.changed(s, [node_id])
            return row

    def nodes(self) -> list[NodeRow]:
        with self.session() as s:
            return list(s.scalars(select(NodeRow).order_by(NodeRow.id)).all())

    def node(self, node_id: str) -> NodeRow | None:
        with self.session() as s:
            return s.get(NodeRow, node_id)

    def set_draining(self, node_id: str, draining: bool) -> NodeRow:
        with self.placements.transaction() as s:
            row = s.get(NodeRow, node_id)
            if row is None:
                raise NotFoundError(f"No node '{node_id}'. Run `berth node list` to see the nodes.")
            if row.draining != draining:
                placement_view.changed(s, [node_id])
            row.draining = draining
            return row

    def node_state(self, node: NodeRow) -> str:
        if not self.placements.node_ready(node):
            return "offline"
        return "draining" if node.draining else "ready"


def name_taken(workflow_id: str) -> ConflictError:
    """The refusal of a start under a name some workflow has: it says nothing of that workflow's owner."""
    return ConflictError(f"a workflow named {workflow_id} exists; choose another name (or `berth apply` to roll it)")
