"""An endpoint's recent minutes in the store: requests, failures, tokens and latency quantiles summed from the audit
tallies the endpoint proxies' batches wrote (server/store/audit.py), and ready copies from the samples the
autoscaler's tick leaves once a minute (`sample_ready`).

Why samples: a copy's readiness changes in half a dozen places (publish, release, drain, unpublish…) and none of
them keeps a past; the autoscaler already reads every pool's copies each tick, under a lease that one control worker
holds, so a minute's count written there costs one small INSERT a minute and touches no request's path."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from berth.contracts import EndpointHistory, HistoryPoint
from berth.contracts.endpoint_history import MAX_WINDOW_S, STEP_S
from server.store.latency_buckets import Buckets, merge, quantile
from server.store.tables import AuditTallyRow, ReadyCopySampleRow, ReplicaRow

KEEP_MINUTES = MAX_WINDOW_S // STEP_S + 1


class EndpointHistoryStore:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._sampled_minute = -1  # this process's last sampled minute: the ticks between write nothing

    def sample_ready(self, endpoint_ids: Sequence[str], now: float | None = None) -> None:
        """Record, once a minute, how many copies of each pool endpoint are ready and not draining."""
        minute = int((time.time() if now is None else now) // STEP_S)
        with self._lock:
            if minute == self._sampled_minute:
                return
            self._sampled_minute = minute
        try:
            with self._session() as s:
                ready = dict(s.execute(select(ReplicaRow.endpoint_id, func.count())
                                       .where(ReplicaRow.ready.is_(True), ReplicaRow.draining.is_(False),
                                              ReplicaRow.endpoint_id.in_(list(endpoint_ids)))
                                       .group_by(ReplicaRow.endpoint_id)).all()) if endpoint_ids else {}
                sampled = set(s.scalars(select(ReadyCopySampleRow.endpoint_id)
                                        .where(ReadyCopySampleRow.minute == minute)))
                s.add_all(ReadyCopySampleRow(endpoint_id=endpoint_id, minute=minute,
                                             ready=int(ready.get(endpoint_id, 0)))
                          for endpoint_id in endpoint_ids if endpoint_id not in sampled)
                s.execute(delete(ReadyCopySampleRow).where(ReadyCopySampleRow.minute < minute - KEEP_MINUTES))
        except IntegrityError:
            pass  # another API process sampled this minute between our read and our write: its count stands

    def forget(self, s: Session, endpoint_id: str) -> None:
        s.execute(delete(ReadyCopySampleRow).where(ReadyCopySampleRow.endpoint_id == endpoint_id))

    def history(self, endpoint_id: str, window_s: int, now: float | None = None) -> EndpointHistory:
        """The window's whole minutes, oldest first, every one present (a quiet minute is zeros)."""
        current = int((time.time() if now is None else now) // STEP_S)
        first = current - window_s // STEP_S
        in_window = (AuditTallyRow.endpoint_id == endpoint_id, AuditTallyRow.minute >= first,
                     AuditTallyRow.minute < current)
        with self._session() as s:
            sums = {row[0]: row[1:] for row in s.execute(
                select(AuditTallyRow.minute, func.sum(AuditTallyRow.attempts), func.sum(AuditTallyRow.successes),
                       func.sum(AuditTallyRow.failures), func.sum(AuditTallyRow.tokens_in),
                       func.sum(AuditTallyRow.tokens_out))
                .where(*in_window).group_by(AuditTallyRow.minute))}
            latencies: dict[int, Buckets] = {}
            for minute, text in s.execute(select(AuditTallyRow.minute, AuditTallyRow.latency_buckets)
                                          .where(*in_window, AuditTallyRow.latency_buckets.is_not(None))):
                merge(latencies.setdefault(minute, {}), text)
            ready = dict(s.execute(select(ReadyCopySampleRow.minute, ReadyCopySampleRow.ready)
                                   .where(ReadyCopySampleRow.endpoint_id == endpoint_id,
                                          ReadyCopySampleRow.minute >= first, ReadyCopySampleRow.minute < current))
                         .all())
        points = [_point(minute, sums.get(minute), latencies.get(minute, {}), ready.get(minute))
                  for minute in range(first, current)]
        return EndpointHistory(endpoint_id=endpoint_id, window_s=window_s, points=points)


def _point(minute: int, sums: Sequence[int] | None, latencies: Buckets, ready: int | None) -> HistoryPoint:
    requests, successes, failures, tokens_in, tokens_out = (int(value or 0) for value in sums or (0,) * 5)
    return HistoryPoint(at=float(minute * STEP_S), requests=requests, requests_per_s=round(requests / STEP_S, 4),
                        successes=successes, failures=failures, tokens_in=tokens_in, tokens_out=tokens_out,
                        p50_ms=quantile(latencies, 0.5), p99_ms=quantile(latencies, 0.99), ready_copies=ready)
