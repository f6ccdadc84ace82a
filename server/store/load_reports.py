"""Load reports in the store: what the endpoint proxy and a pool's LiteLLM sync hook tell any API replica,
kept for the autoscaler's window, and the autoscaler's lease (one autoscaler per stack).

Each report is one inserted row (no read-modify-write, so API replicas never race over a counter); the
autoscaler (control/autoscale_loop.py, in the control worker) reads the window and keeps the arithmetic
(rates, LiteLLM's per-worker totals) in memory as `control.autoscaler` always did.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from enum import Enum

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from berth.contracts import PoolFacts
from berth.contracts.base import JsonScalars
from server.store.tables import EndpointRow, LoadReportRow, ReplicaRow, StoreLockRow

# The autoscaler's rate (control/autoscaler.py) is the mean over this window: smooth enough, quick enough. It is
# stated here, where the reports are kept, so the store below the control worker needs nothing from it.
RATE_WINDOW_S = 10.0
# Twice the window: a report committed late, or a tick that ran late, still finds its rows.
KEEP_S = 2 * RATE_WINDOW_S


class Source(str, Enum):
    FRONT_DOOR = "front_door"  # counted by the endpoint proxy: requests admitted since its last report
    LITELLM = "litellm"  # posted by a Proxy=true pool's LiteLLM sync hook: a worker's running total


class LoadReport(BaseModel):
    # Its own title in /openapi.json: berth.contracts.LoadReport is another model, and a generated client names
    # each class by its title.
    model_config = ConfigDict(title="StoredLoadReport")

    id: int
    endpoint_id: str
    source: Source
    at: float
    requests: int
    worker_pid: int | None = None
    worker_started_at: float | None = None
    routed: list[str] | None = None


class AutoscaledPool(BaseModel):
    """An endpoint with a pool, its sizing facts, and its ready copies (whose counters judge idleness)."""

    endpoint_id: str
    workflow_id: str
    annotations: dict[str, object]
    ready_copies: dict[str, str]  # copy id → engine URL


class AutoscalerView(BaseModel):
    """What one autoscaler tick reads: nothing unless the caller holds the lease."""

    leader: bool
    pools: list[AutoscaledPool] = []
    reports: list[LoadReport] = []


class AutoscalerLease(JsonScalars):  # `ttl_s: false` refused, as its schema says
    holder: str  # the control worker's id for this process
    ttl_s: float = 5.0


class LoadReports:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session

    def add_front_door(self, endpoint_id: str, requests: int, now: float | None = None) -> None:
        if requests > 0:
            self._add(LoadReportRow(endpoint_id=endpoint_id, source=Source.FRONT_DOOR.value, requests=requests,
                                    at=time.time() if now is None else now))

    def add_litellm(self, endpoint_id: str, pid: int, started_at: float, requests_total: int,
                    replicas: tuple[str, ...], now: float | None = None) -> None:
        self._add(LoadReportRow(endpoint_id=endpoint_id, source=Source.LITELLM.value, requests=requests_total,
                                worker_pid=pid, worker_started_at=started_at, routed=sorted(replicas),
                                at=time.time() if now is None else now))

    def _add(self, row: LoadReportRow) -> None:
        with self._session() as s:
            s.add(row)
            s.execute(delete(LoadReportRow).where(LoadReportRow.at < row.at - KEEP_S))  # bounded

    def window(self, now: float | None = None) -> list[LoadReport]:
        since = (time.time() if now is None else now) - KEEP_S
        with self._session() as s:
            rows = s.scalars(select(LoadReportRow).where(LoadReportRow.at >= since)
                             .order_by(LoadReportRow.at, LoadReportRow.id)).all()
            return [LoadReport.model_validate(row, from_attributes=True) for row in rows]

    def litellm_routed(self) -> dict[str, tuple[str, ...]]:
        """Per endpoint, the copies its LiteLLM routes to as its newest report (in the window) said."""
        with self._session() as s:
            newest = (select(func.max(LoadReportRow.id)).where(LoadReportRow.source == Source.LITELLM.value)
                      .group_by(LoadReportRow.endpoint_id))
            rows = s.execute(select(LoadReportRow.endpoint_id, LoadReportRow.routed)
                             .where(LoadReportRow.id.in_(newest))).all()
        return {endpoint_id: tuple(routed or ()) for endpoint_id, routed in rows}

    def forget(self, s: Session, endpoint_id: str) -> None:
        s.execute(delete(LoadReportRow).where(LoadReportRow.endpoint_id == endpoint_id))

    def hold_lease(self, holder: str, ttl_s: float, now: float | None = None) -> bool:
        """Take or renew the autoscaler's lease: one UPDATE, so two takers can never both win."""
        now = time.time() if now is None else now
        free = or_(StoreLockRow.holder == holder, StoreLockRow.holder.is_(None), StoreLockRow.expires_at < now)
        with self._session() as s:
            taken = s.execute(update(StoreLockRow).where(StoreLockRow.name == "autoscaler", free)
                              .values(holder=holder, expires_at=now + ttl_s))
            return bool(taken.rowcount)  # type: ignore[attr-defined]

    def autoscaler_view(self, lease: AutoscalerLease) -> AutoscalerView:
        if not self.hold_lease(lease.holder, lease.ttl_s):
            return AutoscalerView(leader=False)
        with self._session() as s:
            endpoints = s.scalars(select(EndpointRow).order_by(EndpointRow.created_at)).all()
            pools = {e.id: AutoscaledPool(endpoint_id=e.id, workflow_id=e.workflow_id,
                                          annotations=dict(e.annotations or {}), ready_copies={})
                     for e in endpoints if PoolFacts.from_annotations(e.annotations).pool}
            ready = select(ReplicaRow.endpoint_id, ReplicaRow.copy_id, ReplicaRow.url).where(ReplicaRow.ready)
            for endpoint_id, copy_id, url in s.execute(ready):
                if endpoint_id in pools:
                    pools[endpoint_id].ready_copies[copy_id] = url
        return AutoscalerView(leader=True, pools=list(pools.values()), reports=self.window())
