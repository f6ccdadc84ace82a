"""An endpoint's history in the store, on SQLite and on a real PostgreSQL: the minutes of the window summed from
the audit tallies (two batches in one minute merge, another endpoint's records stay out, the current minute is left
out until whole), and the ready-copy samples written once a minute, a second sample of the same minute adding
nothing, and an endpoint removed takes its samples."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from berth.contracts import AuditBatch, AuditPhase, AuditRecord
from berth.security import Cipher
from server.store.database import Store
from server.store.tables import ReadyCopySampleRow

pytestmark = pytest.mark.timeout(60)
NOW = 1_800_000_030.0  # 30 s into a minute
MINUTE = int(NOW // 60)


def _answered(endpoint_id: str, at: float, request_id: str, latency_ms: float) -> list[AuditRecord]:
    return [AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id=request_id, endpoint_id=endpoint_id),
            AuditRecord(at=at, phase=AuditPhase.SUCCESS, request_id=request_id, status=200, tokens_out=3,
                        endpoint_id=endpoint_id, latency_ms=latency_ms)]


def test_the_window_sums_its_minutes_on_both_databases(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url, Cipher.load_or_create(tmp_path / "keys"))
    earlier, current = (MINUTE - 2) * 60.0, MINUTE * 60.0
    store.audit.append_batch(AuditBatch.of("w", 1, _answered("ep-1", earlier + 1, "a", 100.0)
                                           + _answered("ep-2", earlier + 1, "x", 1.0)))
    store.audit.append_batch(AuditBatch.of("w", 2, _answered("ep-1", earlier + 50, "b", 400.0)
                                           + _answered("ep-1", current + 1, "c", 5.0)))
    history = store.history.history("ep-1", 300, now=NOW)
    assert [p.at for p in history.points] == [(MINUTE - 5 + n) * 60.0 for n in range(5)]
    point = history.points[3]
    assert (point.at, point.requests, point.successes, point.tokens_out) == (earlier, 2, 2, 6)
    assert point.p50_ms == pytest.approx(100.0, rel=0.09) and point.p99_ms == pytest.approx(400.0, rel=0.09)
    assert sum(p.requests for p in history.points) == 2  # ep-2's request and the current minute's are not here


def test_ready_copies_are_sampled_once_a_minute(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url, Cipher.load_or_create(tmp_path / "keys"))
    for copy_id, ready in (("wf.copy-0", True), ("wf.copy-1", True), ("wf.copy-2", False)):
        store.upsert_replica("wf", "ep-1", copy_id, "http://127.0.0.1:9000", ready)
    store.drain_replica("wf.copy-1")
    store.history.sample_ready(["ep-1", "ep-idle"], now=NOW - 60)
    store.upsert_replica("wf", "ep-1", "wf.copy-2", "http://127.0.0.1:9000", True)
    store.history.sample_ready(["ep-1", "ep-idle"], now=NOW - 59)  # the same minute: already sampled
    with store.session() as s:
        rows = s.execute(select(ReadyCopySampleRow.endpoint_id, ReadyCopySampleRow.minute, ReadyCopySampleRow.ready)
                         .order_by(ReadyCopySampleRow.endpoint_id)).all()
    assert [tuple(row) for row in rows] == [("ep-1", MINUTE - 1, 1), ("ep-idle", MINUTE - 1, 0)]
    assert store.history.history("ep-1", 300, now=NOW).points[-1].ready_copies == 1
    store.remove_endpoint("ep-1")  # an endpoint removed takes its samples with it
    with store.session() as s:
        assert set(s.scalars(select(ReadyCopySampleRow.endpoint_id))) == {"ep-idle"}
