"""The audit chain in the store (server/store/audit.py), on SQLite and on a real PostgreSQL: rows are appended
in order with each hash linking to the one before; a retried batch adds nothing twice; listing filters and
is bounded; verify recomputes the chain and names the first row edited (or unlinked) in the database; and
two stores (two API processes) appending at once never fork the chain."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import update

from berth.contracts import AuditPhase, AuditRecord
from berth.security import Cipher
from server.store.audit import GENESIS, VERIFY_PAGE
from server.store.database import Store
from server.store.tables import AuditChainRow

pytestmark = pytest.mark.timeout(120)


def _store(store_url: str, tmp_path: Path) -> Store:
    return Store(store_url, Cipher.load_or_create(tmp_path / "keys"))


def _records(request: str, endpoint: str = "ep-1", user: str | None = "alice", at: float = 1000.0,
             status: int = 200) -> list[AuditRecord]:
    outcome = AuditPhase.SUCCESS if status < 400 else AuditPhase.FAILED
    return [AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id=request, user=user, endpoint_id=endpoint),
            AuditRecord(at=at + 0.25, phase=outcome, request_id=request, status=status, user=user,
                        endpoint_id=endpoint, copy_id=f"{endpoint}.copy-0", latency_ms=250.0, tokens_in=3,
                        tokens_out=5)]


def test_rows_are_chained_in_order_and_verify(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    assert store.audit.verify().ok and store.audit.verify().rows == 0
    assert store.audit.append_batch(_records("r1")).appended == 2
    assert store.audit.append_batch(_records("r2", status=502)).appended == 2
    rows = store.audit.list()
    assert [(r.seq, r.request_id, r.phase) for r in rows] == [
        (1, "r1", AuditPhase.ATTEMPT), (2, "r1", AuditPhase.SUCCESS), (3, "r2", AuditPhase.ATTEMPT),
        (4, "r2", AuditPhase.FAILED)]
    assert rows[0].prev_hash == GENESIS
    assert all(later.prev_hash == earlier.hash for earlier, later in zip(rows, rows[1:], strict=False))
    # The hash is SHA-256(prev_hash + canonical JSON), reproducible by anyone reading the rows.
    first = rows[0].model_dump(mode="json", exclude={"prev_hash", "hash"})
    text = json.dumps(first, sort_keys=True, separators=(",", ":"))
    assert rows[0].hash == hashlib.sha256((GENESIS + text).encode()).hexdigest()
    verdict = store.audit.verify()
    assert verdict.ok and verdict.rows == 4 and verdict.first_broken_seq is None


def test_a_retried_batch_adds_nothing_twice(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch(_records("r1"))
    again = store.audit.append_batch([*_records("r1"), *_records("r2")])
    assert (again.appended, again.duplicates) == (2, 2)
    assert len(store.audit.list()) == 4 and store.audit.verify().ok


def test_listing_filters_and_is_bounded(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch([*_records("r1", "ep-1", "alice", 1000.0), *_records("r2", "ep-2", "bob", 2000.0)])
    assert {r.request_id for r in store.audit.list(endpoint_id="ep-2")} == {"r2"}
    assert {r.request_id for r in store.audit.list(user="alice")} == {"r1"}
    assert {r.request_id for r in store.audit.list(since=1500.0)} == {"r2"}
    assert store.audit.list(key_id="k-1") == []
    assert [r.seq for r in store.audit.list(limit=3)] == [2, 3, 4]  # the newest, in chain order


def test_verify_names_a_row_edited_in_the_database(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    for n in range(5):
        store.audit.append_batch(_records(f"r{n}"))
    with store.engine.begin() as connection:  # what someone with the database's password could do
        connection.execute(update(AuditChainRow).where(AuditChainRow.seq == 7).values(tokens_out=1))
    verdict = store.audit.verify()
    assert not verdict.ok and verdict.first_broken_seq == 7 and verdict.rows == 7
    assert "row 7" in verdict.message and "changed" in verdict.message


def test_verify_names_the_row_after_one_edited_with_its_hash_recomputed(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch([*_records("r1"), *_records("r2")])
    forged = store.audit.list()[1].model_copy(update={"status": 500})
    fields = forged.model_dump(mode="json", exclude={"prev_hash", "hash"})
    digest = hashlib.sha256((forged.prev_hash + json.dumps(fields, sort_keys=True, separators=(",", ":")))
                            .encode()).hexdigest()
    with store.engine.begin() as connection:
        connection.execute(update(AuditChainRow).where(AuditChainRow.seq == 2).values(status=500, hash=digest))
    verdict = store.audit.verify()
    assert verdict.first_broken_seq == 3 and "link" in verdict.message


def test_verify_reads_the_chain_in_pages(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    records = [record for n in range(VERIFY_PAGE // 2 + 3) for record in _records(f"r{n}", at=1000.0 + n)]
    for start in range(0, len(records), 500):
        store.audit.append_batch(records[start:start + 500])
    verdict = store.audit.verify()
    assert verdict.ok and verdict.rows == len(records) > VERIFY_PAGE


def test_two_stores_appending_at_once_never_fork_the_chain(store_url: str, tmp_path: Path) -> None:
    one, two = _store(store_url, tmp_path), _store(store_url, tmp_path)  # two API processes' stores

    def append(n: int) -> None:
        (one if n % 2 else two).audit.append_batch(_records(f"r{n}", at=1000.0 + n))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(append, range(40)))
    rows = one.audit.list(limit=1000)
    assert [r.seq for r in rows] == list(range(1, 81))
    assert len({r.prev_hash for r in rows}) == 80  # no two rows claim the same predecessor
    assert one.audit.verify().ok and two.audit.verify().rows == 80
