"""Copy spans: one row a placement of a copy, opened at its reservation, marked at its first readiness and closed at
its release, each in the transaction that makes the change (one extra write each). Usage's GPU-seconds are summed
from them (server/store/usage.py): reservations themselves are deleted on release."""

from __future__ import annotations

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from berth.contracts import ReserveRequest
from server.store.tables import CopySpanRow, WorkflowRow

OPEN = insert(CopySpanRow)
ATTRIBUTION = select(WorkflowRow.owner, WorkflowRow.org, WorkflowRow.endpoint_id).where(
    WorkflowRow.id == bindparam("workflow_id"))


def opened(s: Session, request: ReserveRequest, now: float) -> None:
    """A span for a copy just reserved, attributed to its workflow's owner, organization and endpoint as they are
    now. A copy of a workflow the store does not hold (a test's, a bench's) is attributed to no one ("")."""
    connection = s.connection()  # Core, not the ORM: this runs in every reservation (bench/placement.py)
    workflow = connection.execute(ATTRIBUTION, {"workflow_id": request.workflow_id}).first()
    owner, org, endpoint_id = ("", "", "") if workflow is None else workflow
    connection.execute(OPEN, {"copy_id": request.copy_id, "workflow_id": request.workflow_id,
                              "endpoint_id": endpoint_id, "owner": owner, "org": org,
                              "gpus": request.nodes * request.gpus_per_node, "reserved_at": now})


def ready(s: Session, copy_id: str, now: float) -> None:
    """The copy's open span was ready from `now` on, unless it was ready before (a copy unready for a while and
    ready again keeps its first ready time: it held its GPUs throughout)."""
    s.execute(update(CopySpanRow).where(CopySpanRow.copy_id == copy_id, CopySpanRow.released_at.is_(None),
                                        CopySpanRow.ready_at.is_(None))
              .values(ready_at=now).execution_options(synchronize_session=False))


def closed(s: Session, copy_id: str, now: float) -> None:
    """The copy's open span ends now (a release repeated after a lost reply closes nothing more)."""
    s.execute(update(CopySpanRow).where(CopySpanRow.copy_id == copy_id, CopySpanRow.released_at.is_(None))
              .values(released_at=now).execution_options(synchronize_session=False))
