"""Policies in the store: one row per user, group or organization policy (its rules as the PolicyRules contract's
JSON), and the facts the quotas count — the copies placed now, each with its workflow's owner, organization and
groups — read in the caller's session where a decision must hold under the placement lock."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Protocol

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from berth.contracts.policies import Policy, PolicyKind, PolicyRules
from server import policy_rules
from server.policy_rules import Ask, HeldCopy, Subject
from server.store.tables import EndpointRow, GroupRow, PolicyRow, ReservationRow, UserRow, WorkflowRow


class Sessions(Protocol):
    """What Policies needs of the store (server/store/database.py's Store): a session, one transaction. Named here, for
    the store imports this module (placement reads placement_refusal in its own transaction)."""

    def session(self) -> AbstractContextManager[Session]: ...


def _policy(row: PolicyRow) -> Policy:
    kind: PolicyKind = row.kind  # type: ignore[assignment]  # written only from a PolicyKind
    return Policy(kind=kind, name=row.name, rules=PolicyRules.model_validate(row.rules), set_by=row.set_by,
                  set_at=row.set_at)


def policies_in(s: Session) -> list[Policy]:
    """Every policy (a small table: a handful per group and organization), by kind and name."""
    return [_policy(row) for row in s.scalars(select(PolicyRow).order_by(PolicyRow.kind, PolicyRow.name))]


def held_copies(s: Session) -> list[HeldCopy]:
    """Every placed copy (a reservation) with its GPUs and its workflow's owner, organization and groups."""
    rows = s.execute(select(ReservationRow.workflow_id, ReservationRow.placement, WorkflowRow.owner,
                            WorkflowRow.org, EndpointRow.groups)
                     .join(WorkflowRow, WorkflowRow.id == ReservationRow.workflow_id)
                     .join(EndpointRow, EndpointRow.id == WorkflowRow.endpoint_id, isouter=True))
    return [HeldCopy(workflow_id=workflow_id, owner=owner, org=org, groups=tuple(groups or ()),
                     gpus=sum(len(rank.get("gpus", ())) for rank in (placement or {}).get("ranks", ())))
            for workflow_id, placement, owner, org, groups in rows]


def subject_in(s: Session, workflow_id: str) -> Subject | None:
    """Whom the policies bind for a workflow: its owner, organization, and the groups recorded at its start."""
    row = s.get(WorkflowRow, workflow_id)
    if row is None:
        return None
    endpoint = s.get(EndpointRow, row.endpoint_id)
    return Subject(user=row.owner, org=row.org, groups=tuple(endpoint.groups or ()) if endpoint else ())


def placement_refusal(s: Session, workflow_id: str, gpus: int) -> str | None:
    """The quota line that keeps one more copy of `gpus` GPUs of `workflow_id` from being placed now, or None: read
    in the placement's own transaction, so two copies placed at once cannot both take the last GPUs of a quota."""
    quotas = [p for p in policies_in(s) if p.rules.max_gpus is not None or p.rules.max_copies is not None]
    subject = subject_in(s, workflow_id) if quotas else None
    policies = policy_rules.applying(quotas, subject) if subject is not None else []
    if subject is None or not policies:
        return None
    usage = policy_rules.tally(policies, held_copies(s))
    return policy_rules.decide(policies, subject, Ask(gpus=gpus, copies=1), usage)


class Policies:
    def __init__(self, store: Sessions) -> None:
        self.store = store

    def all(self) -> list[Policy]:
        with self.store.session() as s:
            return policies_in(s)

    def held(self) -> list[HeldCopy]:
        with self.store.session() as s:
            return held_copies(s)

    def subject(self, workflow_id: str) -> Subject | None:
        with self.store.session() as s:
            return subject_in(s, workflow_id)

    def placement_refusal(self, workflow_id: str, gpus: int) -> str | None:
        with self.store.session() as s:
            return placement_refusal(s, workflow_id, gpus)

    def subject_known(self, kind: PolicyKind, name: str) -> bool:
        """Whether this cluster has the user, group or organization (some user's or group's) a policy would bind."""
        with self.store.session() as s:
            if kind == "user":
                return s.get(UserRow, name) is not None
            if kind == "group":
                return s.get(GroupRow, name) is not None
            return (s.scalars(select(UserRow.org).where(UserRow.org == name).limit(1)).first() is not None
                    or s.scalars(select(GroupRow.org).where(GroupRow.org == name).limit(1)).first() is not None)

    def put(self, kind: PolicyKind, name: str, rules: PolicyRules, by: str) -> Policy:
        """Set (replace) the policy: what `rules` leaves out allows anything."""
        with self.store.session() as s:
            row = s.get(PolicyRow, (kind, name), with_for_update=True)
            written = rules.model_dump(mode="json")
            if row is None:
                row = PolicyRow(kind=kind, name=name, rules=written, set_by=by, set_at=time.time())
                s.add(row)
            else:
                row.rules, row.set_by, row.set_at = written, by, time.time()
            s.flush()
            return _policy(row)

    def remove(self, kind: PolicyKind, name: str) -> bool:
        with self.store.session() as s:
            removed = s.execute(delete(PolicyRow).where(PolicyRow.kind == kind, PolicyRow.name == name))
            return bool(removed.rowcount)  # type: ignore[attr-defined]
