"""The proxy's audit writer alone: batches of at most `batch_size`, posted by its background task; a batch
the API refuses (down) is posted again whole, under its number, before anything after it; a full queue drops its
oldest records, counted and logged in one line; stopping posts what waits."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from berth.contracts import AuditBatch, AuditPhase, AuditRecord
from berth.errors import UnavailableError
from gateway.endpoint.audit_writer import AuditWriter


class FlakyApi:
    def __init__(self) -> None:
        self.up = True
        self.batches: list[list[AuditRecord]] = []
        self.tried: list[tuple[str, int, int]] = []  # (writer, number, records) of every post, answered or not

    async def post(self, batch: AuditBatch) -> None:
        self.tried.append((batch.writer, batch.number, len(batch)))
        if not self.up:
            raise UnavailableError("Cannot reach the Berth API")
        self.batches.append(batch.records())

    def posted(self) -> list[str]:
        return [f"{r.request_id}:{r.phase.value}" for batch in self.batches for r in batch]


def _requests(writer: AuditWriter, count: int, status: int = 200) -> list[str]:
    ids = []
    for _ in range(count):
        audited = writer.request("ep-1")
        audited.admit("alice")
        audited.status = status
        audited.end()
        ids.append(audited.request_id)
    return ids


async def _wait_for(check: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.01)


async def test_batches_are_bounded_and_a_refused_batch_waits_in_order() -> None:
    api = FlakyApi()
    writer = AuditWriter(api.post, batch_size=4, every_s=0.02)
    api.up = False
    ids = _requests(writer, 3)  # six records
    assert not await writer.flush() and len(writer) == 6  # refused: kept, nothing lost
    ids += _requests(writer, 1)  # two more arrive while the API is down: they wait behind the refused batch
    writer.start()
    try:
        api.up = True
        await _wait_for(lambda: len(api.posted()) == 8)
    finally:
        await writer.aclose()
    assert [len(batch) for batch in api.batches] == [4, 4]
    assert api.posted() == [f"{i}:{phase}" for i in ids for phase in ("ATTEMPT", "SUCCESS")]
    # The refused batch went again as it was, under its number (the store keeps a batch once).
    writer_id = api.tried[0][0]
    assert api.tried[0] == api.tried[1] == (writer_id, 1, 4) and api.tried[-1] == (writer_id, 2, 4)


async def test_a_full_queue_drops_the_oldest_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    api = FlakyApi()
    api.up = False
    writer = AuditWriter(api.post, capacity=10, batch_size=4, every_s=0.02)
    ids = _requests(writer, 8, status=503)  # 16 records into 10 places
    assert len(writer) == 10 and writer.dropped == 6
    writer.start()
    with caplog.at_level(logging.WARNING, logger="berth.audit"):
        await _wait_for(lambda: "dropped the 6 oldest record(s)" in caplog.text)
    api.up = True
    await writer.aclose()  # stopping posts what waits
    assert api.posted()[0] == f"{ids[3]}:ATTEMPT" and len(api.posted()) == 10
    assert {r.phase for batch in api.batches for r in batch} == {AuditPhase.ATTEMPT, AuditPhase.FAILED}


class SlowApi(FlakyApi):
    async def post(self, batch: AuditBatch) -> None:
        await asyncio.sleep(0.02)  # the API's own time per post, simulated: not a wait for a condition
        await super().post(batch)


async def test_under_steady_load_records_go_in_few_batches_not_a_post_every_few_records() -> None:
    api = SlowApi()
    writer = AuditWriter(api.post, batch_size=200, every_s=0.5)
    writer.start()
    ids: list[str] = []
    for _ in range(500):  # ~1000 requests a second for half a second, two records each
        ids += _requests(writer, 1)
        await asyncio.sleep(0.001)  # pacing the load
    await writer.aclose()
    assert len(api.posted()) == 2 * len(ids)  # nothing lost
    # One round per 0.5 s and one per full batch of 200: a handful, where draining until empty made ~25.
    assert len(api.batches) <= 10, [len(batch) for batch in api.batches]


async def test_woken_by_a_full_batch_it_posts_full_batches_and_the_rest_on_the_tick() -> None:
    api = FlakyApi()
    writer = AuditWriter(api.post, batch_size=4, every_s=0.3)
    writer.start()
    try:
        _requests(writer, 5)  # ten records: two full batches wake the writer at once, two wait for the tick
        await _wait_for(lambda: len(api.batches) == 2)
        woken_at = time.monotonic()
        assert [len(batch) for batch in api.batches] == [4, 4] and len(writer) == 2
        await _wait_for(lambda: len(api.batches) == 3)
        assert len(api.batches[2]) == 2 and time.monotonic() - woken_at > 0.1  # the tick's, not the wake's
    finally:
        await writer.aclose()
