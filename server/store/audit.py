"""The audit chain in the store: append the endpoint proxy's batches in order, each record's hash linking to the
one before (server/store/audit_text.py); list records (bounded); count a key's requests; verify the chain by
recomputing every hash.

A batch is one row (`audit_batches`: its records' canonical lines and their hashes) and a few tallies
(`audit_tallies`: per minute, endpoint, copy, key and user, the records of each phase and their tokens), not a row
a record: the API appends two records for every proxied request, and an INSERT a record with its indexes was most
of what the API spent on a request it never served (docs/performance.md). Listing reads the batches the tallies
point to; counting reads the tallies alone.

Appending is serialised like placements (server/store/placement.py): a lock in the process, then an UPDATE of the
`audit` row of `store_locks` first (a row lock on PostgreSQL, the write lock on SQLite), so two API processes never
read the same tip and fork the chain. A batch already stored (same writer and number: sent again after its answer
was lost) adds nothing, so retries are safe.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from math import log2
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from berth.contracts import MAX_AUDIT_LIST, AuditAppended, AuditBatch, AuditRow, AuditVerdict, KeyRequests
from berth.contracts.audit import AuditPhase
from berth.contracts.base import INT64_MAX
from server.store.audit_text import GENESIS, HASH_LENGTH, BatchText, links, stored_row
from server.store.latency_buckets import LAST, PER_DOUBLING, Buckets, encoded
from server.store.tables import AuditBatchRow, AuditTallyRow, StoreLockRow

VERIFY_PAGE = 50  # batches read at a time by verify(): memory stays bounded whatever the chain's length
LIST_PAGE = 20  # batches read at a time by list()
TIP = (select(AuditBatchRow.number, AuditBatchRow.first_seq, AuditBatchRow.count, AuditBatchRow.tip_hash)
       .order_by(AuditBatchRow.number.desc()).limit(1))
INSERT_BATCH = insert(AuditBatchRow)
INSERT_TALLIES = insert(AuditTallyRow)
# A tally's key, and its counts: attempts, successes, failures, tokens in, tokens out.
TallyKey = tuple[int, str, str | None, str | None, str | None]
PHASE_COLUMN = {AuditPhase.ATTEMPT: 0, AuditPhase.SUCCESS: 1, AuditPhase.FAILED: 2}
SUCCESS = AuditPhase.SUCCESS
Row = tuple[Any, ...]  # a record's fields in AuditBatch.rows()'s order


class AuditChain:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session
        self._lock = threading.Lock()

    def append_batch(self, batch: AuditBatch) -> AuditAppended:
        """Add the batch's records to the chain's end, in the order given, in one transaction."""
        records = list(batch.rows())
        if not records:
            return AuditAppended(appended=0)
        tallies, latencies = _tallies(records)
        with self._lock, self._session() as s:
            s.execute(update(StoreLockRow).where(StoreLockRow.name == "audit").values(holder=StoreLockRow.holder)
                      .execution_options(synchronize_session=False))
            connection = s.connection()
            if _stored(connection, batch):
                return AuditAppended(appended=0, duplicates=len(batch))
            tip = connection.execute(TIP).first()
            number, seq, prev_hash = (tip[0] + 1, tip[1] + tip[2], tip[3]) if tip is not None else (1, 1, GENESIS)
            texts, hashes = _linked(records, seq, prev_hash)
            connection.execute(INSERT_BATCH, {
                "number": number, "writer": batch.writer, "writer_batch": batch.number, "first_seq": seq,
                "count": len(texts), "prev_hash": prev_hash, "tip_hash": hashes[-1], "records": "\n".join(texts),
                "hashes": "".join(hashes)})
            connection.execute(INSERT_TALLIES, [
                {"batch": number, "ordinal": ordinal, "minute": key[0], "endpoint_id": key[1], "copy_id": key[2],
                 "key_id": key[3], "user": key[4], "attempts": counts[0], "successes": counts[1],
                 "failures": counts[2], "tokens_in": min(INT64_MAX, counts[3]),
                 "tokens_out": min(INT64_MAX, counts[4]), "latency_buckets": encoded(latencies.get(key))}
                for ordinal, (key, counts) in enumerate(tallies.items())])
        return AuditAppended(appended=len(texts))

    def list(self, endpoint_id: str | None = None, key_id: str | None = None, user: str | None = None,
             since: float | None = None, limit: int = 100) -> list[AuditRow]:
        """The newest `limit` records (at most MAX_AUDIT_LIST) that match, in chain order."""
        wanted = max(1, min(limit, MAX_AUDIT_LIST))
        filters = [(name, value) for name, value in (("endpoint_id", endpoint_id), ("key_id", key_id), ("user", user))
                   if value is not None]
        found: list[AuditRow] = []
        for batch in self._newest_batches(endpoint_id, key_id, user, since):
            # Newest first, each line parsed only when reached: a listing of the newest few reads a few lines.
            for index, text in _lines_newest_first(batch):
                fields = json.loads(text)
                if all(fields[name] == value for name, value in filters) and (since is None or fields["at"] >= since):
                    found.append(_row(batch, index, fields))
                    if len(found) == wanted:
                        return found[::-1]
        return found[::-1]

    def key_requests(self, key_id: str) -> KeyRequests:
        """How many requests a key made (ATTEMPT records) and how many were answered below 400 (SUCCESS): the
        chain sees every request whatever the key's limits, so a key without a quota is counted too."""
        query = (select(func.coalesce(func.sum(AuditTallyRow.attempts), 0),
                        func.coalesce(func.sum(AuditTallyRow.successes), 0))
                 .where(AuditTallyRow.key_id == key_id))
        with self._session() as s:
            made, answered = s.execute(query).one()
        return KeyRequests(made=int(made), answered=int(answered))

    def verify(self) -> AuditVerdict:
        """Recompute every record's hash from the hash before it and its own line, batch by batch; name the first
        record that does not hold."""
        expected_prev, checked = GENESIS, 0
        for batch in self._batches():
            lines = batch.records.split("\n")
            if batch.prev_hash != expected_prev:
                return _broken(batch.first_seq, checked + 1, "its link to the record before does not hold (that "
                                                             "record was changed, removed or inserted)")
            if len(lines) != batch.count or len(batch.hashes) != batch.count * HASH_LENGTH:
                return _broken(batch.first_seq, checked + 1, "its batch's records and hashes do not agree (a record "
                                                             "was removed or inserted)")
            # Each computed from the stored hash before it, as far as those agree: the first that does not is named.
            computed = links(expected_prev, lines)
            for index, text in enumerate(lines):
                checked += 1
                stored = batch.hashes[index * HASH_LENGTH:(index + 1) * HASH_LENGTH]
                if f'"seq":{batch.first_seq + index},' not in text or computed[index] != stored:
                    return _broken(batch.first_seq + index, checked,
                                   "its hash does not follow from the record before and its own fields (this "
                                   "record was changed, or the one before it was changed, removed or inserted)")
                expected_prev = stored
        return AuditVerdict(ok=True, rows=checked, message=f"The audit chain holds: {checked} row(s) verified.")

    def _newest_batches(self, endpoint_id: str | None, key_id: str | None, user: str | None,
                        since: float | None) -> Iterator[AuditBatchRow]:
        """The batches that may hold a matching record, newest first, a page at a time."""
        numbers = select(AuditTallyRow.batch).distinct()
        for column, value in ((AuditTallyRow.endpoint_id, endpoint_id), (AuditTallyRow.key_id, key_id),
                              (AuditTallyRow.user, user)):
            if value is not None:
                numbers = numbers.where(column == value)
        if since is not None:
            numbers = numbers.where(AuditTallyRow.minute >= int(since // 60))
        before: int | None = None
        while True:
            page = numbers if before is None else numbers.where(AuditTallyRow.batch < before)
            with self._session() as s:
                chosen = s.scalars(page.order_by(AuditTallyRow.batch.desc()).limit(LIST_PAGE)).all()
                batches = s.scalars(select(AuditBatchRow).where(AuditBatchRow.number.in_(chosen))
                                    .order_by(AuditBatchRow.number.desc())).all() if chosen else []
            yield from batches
            if len(chosen) < LIST_PAGE:
                return
            before = chosen[-1]

    def _batches(self) -> Iterator[AuditBatchRow]:
        after = 0
        while True:
            with self._session() as s:
                page = s.scalars(select(AuditBatchRow).where(AuditBatchRow.number > after)
                                 .order_by(AuditBatchRow.number).limit(VERIFY_PAGE)).all()
            if not page:
                return
            yield from page
            after = page[-1].number


def _stored(connection: Connection, batch: AuditBatch) -> bool:
    found = connection.execute(select(AuditBatchRow.number).where(AuditBatchRow.writer == batch.writer)
                               .where(AuditBatchRow.writer_batch == batch.number)).first()
    return found is not None


def _linked(records: list[Row], first_seq: int, prev_hash: str) -> tuple[list[str], list[str]]:
    """The records' canonical texts, numbered from `first_seq`, and their hashes, the first linked to `prev_hash`."""
    texts = list(map(BatchText().record, range(first_seq, first_seq + len(records)), records))
    return texts, links(prev_hash, texts)


def _tallies(records: list[Row]) -> tuple[dict[TallyKey, list[int]], dict[TallyKey, Buckets]]:
    """Per (minute, endpoint, copy, key, user): attempts, successes, failures, tokens in and out; and the latency
    histogram of its successes (an endpoint's p50/p99 a minute: server/store/endpoint_history.py). Token sums are
    clamped to the column's range when stored: a copy's usage figures are not Berth's to trust, and a tally past
    the range would refuse every batch after it."""
    tallies: dict[TallyKey, list[int]] = {}
    latencies: dict[TallyKey, Buckets] = {}
    for at, phase, _, _, tokens_in, tokens_out, key_id, user, endpoint_id, copy_id, latency_ms in records:
        key = (int(at // 60), endpoint_id, copy_id, key_id, user)
        counts = tallies.get(key)
        if counts is None:
            counts = tallies[key] = [0, 0, 0, 0, 0]
        counts[PHASE_COLUMN[phase]] += 1
        counts[3] += tokens_in
        counts[4] += tokens_out
        if phase is SUCCESS:
            # latency_buckets.bucket_of, inlined: a call a record was half of what the histogram cost this path.
            bucket = 0 if latency_ms < 1.0 else min(LAST, int(PER_DOUBLING * log2(latency_ms)))
            buckets = latencies.get(key)
            if buckets is None:
                buckets = latencies[key] = {}
            buckets[bucket] = buckets.get(bucket, 0) + 1
    return tallies, latencies


def _lines_newest_first(batch: AuditBatchRow) -> Iterator[tuple[int, str]]:
    lines = batch.records.split("\n")
    return zip(range(len(lines) - 1, -1, -1), reversed(lines), strict=True)


def _row(batch: AuditBatchRow, index: int, fields: dict[str, Any]) -> AuditRow:
    """Record `index` of the batch (its fields parsed from its line) with the hash before it and its own."""
    prev_hash = batch.prev_hash if index == 0 else batch.hashes[(index - 1) * HASH_LENGTH:index * HASH_LENGTH]
    return stored_row(fields, prev_hash, batch.hashes[index * HASH_LENGTH:(index + 1) * HASH_LENGTH])


def _broken(seq: int, checked: int, why: str) -> AuditVerdict:
    return AuditVerdict(ok=False, rows=checked, first_broken_seq=seq,
                        message=f"The audit chain is broken at row {seq}: {why}.")

