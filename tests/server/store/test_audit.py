"""The audit chain in the store (server/store/audit.py), on SQLite and on a real PostgreSQL: records are appended
in order with each hash linking to the one before; a batch sent again (same writer and number) adds nothing twice;
listing filters and is bounded; a key's requests are counted from the tallies; verify recomputes the chain and
names the first record edited in the database (or after one edited with its hash recomputed); two stores (two API
processes) appending at once never fork the chain; and a chain stored a row a record (migration 0007) moves into
batches with every hash kept, and back."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import select, text, update

from berth.contracts import AuditBatch, AuditPhase, AuditRecord
from berth.security import Cipher
from server.store import schema
from server.store.audit import VERIFY_PAGE
from server.store.audit_text import GENESIS, HASH_LENGTH
from server.store.database import Store
from server.store.tables import AuditBatchRow

pytestmark = pytest.mark.timeout(120)


def _store(store_url: str, tmp_path: Path) -> Store:
    return Store(store_url, Cipher.load_or_create(tmp_path / "keys"))


def _records(request: str, endpoint: str = "ep-1", user: str | None = "alice", at: float = 1000.0,
             status: int = 200, key: str | None = None) -> list[AuditRecord]:
    outcome = AuditPhase.SUCCESS if status < 400 else AuditPhase.FAILED
    return [AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id=request, user=user, endpoint_id=endpoint,
                        key_id=key),
            AuditRecord(at=at + 0.25, phase=outcome, request_id=request, status=status, user=user,
                        endpoint_id=endpoint, copy_id=f"{endpoint}.copy-0", latency_ms=250.0, tokens_in=3,
                        tokens_out=5, key_id=key)]


def _batch(records: list[AuditRecord], number: int, writer: str = "proxy-a") -> AuditBatch:
    return AuditBatch.of(writer, number, records)


def test_records_are_chained_in_order_and_verify(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    assert store.audit.verify().ok and store.audit.verify().rows == 0
    assert store.audit.append_batch(_batch(_records("r1"), 1)).appended == 2
    assert store.audit.append_batch(_batch(_records("r2", status=502), 2)).appended == 2
    rows = store.audit.list()
    assert [(r.seq, r.request_id, r.phase) for r in rows] == [
        (1, "r1", AuditPhase.ATTEMPT), (2, "r1", AuditPhase.SUCCESS), (3, "r2", AuditPhase.ATTEMPT),
        (4, "r2", AuditPhase.FAILED)]
    assert rows[0].prev_hash == GENESIS
    assert all(later.prev_hash == earlier.hash for earlier, later in zip(rows, rows[1:], strict=False))
    # The hash is SHA-256(prev_hash + canonical JSON), reproducible by anyone reading the rows.
    first = rows[0].model_dump(mode="json", exclude={"prev_hash", "hash"})
    canonical = json.dumps(first, sort_keys=True, separators=(",", ":"))
    assert rows[0].hash == hashlib.sha256((GENESIS + canonical).encode()).hexdigest()
    verdict = store.audit.verify()
    assert verdict.ok and verdict.rows == 4 and verdict.first_broken_seq is None


def test_a_batch_sent_again_adds_nothing_twice(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch(_batch(_records("r1"), 1))
    again = store.audit.append_batch(_batch(_records("r1"), 1))
    assert (again.appended, again.duplicates) == (0, 2)
    # Another writer's batch 1 is another batch.
    other = store.audit.append_batch(_batch(_records("r2"), 1, writer="proxy-b"))
    assert (other.appended, other.duplicates) == (2, 0)
    assert len(store.audit.list()) == 4 and store.audit.verify().ok


def test_listing_filters_and_is_bounded(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch(_batch([*_records("r1", "ep-1", "alice", 1000.0),
                                     *_records("r2", "ep-2", "bob", 2000.0)], 1))
    store.audit.append_batch(_batch(_records("r3", "ep-1", "bob", 3000.0, key="k-1"), 2))
    assert {r.request_id for r in store.audit.list(endpoint_id="ep-2")} == {"r2"}
    assert {r.request_id for r in store.audit.list(user="alice")} == {"r1"}
    assert {r.request_id for r in store.audit.list(user="bob", endpoint_id="ep-1")} == {"r3"}
    assert {r.request_id for r in store.audit.list(since=1500.0)} == {"r2", "r3"}
    assert {r.request_id for r in store.audit.list(since=2000.1)} == {"r2", "r3"}  # r2's outcome is at 2000.25
    assert [r.phase for r in store.audit.list(since=2000.1, user="bob", endpoint_id="ep-2")] == [AuditPhase.SUCCESS]
    assert {r.request_id for r in store.audit.list(key_id="k-1")} == {"r3"}
    assert store.audit.list(key_id="k-2") == []
    assert [r.seq for r in store.audit.list(limit=3)] == [4, 5, 6]  # the newest, in chain order, across batches


def test_listing_reads_past_a_page_of_batches(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch(_batch(_records("old", user="carol"), 1))
    for n in range(2, 30):  # more batches than a listing reads at a time, none of them carol's
        store.audit.append_batch(_batch(_records(f"r{n}"), n))
    assert [r.request_id for r in store.audit.list(user="carol")] == ["old", "old"]
    assert len(store.audit.list(limit=1000)) == 58


def test_a_keys_requests_are_counted_from_the_tallies(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch(_batch([*_records("r1", key="k-1"), *_records("r2", key="k-1", status=429),
                                     *_records("r3", key="k-2")], 1))
    store.audit.append_batch(_batch(_records("r4", key="k-1", at=5000.0), 2))
    counted = store.audit.key_requests("k-1")
    assert (counted.made, counted.answered) == (3, 2)
    assert (store.audit.key_requests("k-9").made, store.audit.key_requests("k-9").answered) == (0, 0)


def _edit_line(store: Store, seq: int, old: str, new: str, rehash: bool = False) -> None:
    """What someone with the database's password could do: change one record's line (and, with `rehash`, its
    stored hash to match)."""
    with store.engine.begin() as connection:
        batch = connection.execute(select(AuditBatchRow.__table__).where(AuditBatchRow.first_seq <= seq)
                                   .order_by(AuditBatchRow.number.desc()).limit(1)).mappings().one()
        lines, index = batch["records"].split("\n"), seq - batch["first_seq"]
        assert old in lines[index]
        lines[index] = lines[index].replace(old, new)
        hashes = batch["hashes"]
        if rehash:
            prev = batch["prev_hash"] if index == 0 else hashes[(index - 1) * HASH_LENGTH:index * HASH_LENGTH]
            digest = hashlib.sha256((prev + lines[index]).encode()).hexdigest()
            hashes = hashes[:index * HASH_LENGTH] + digest + hashes[(index + 1) * HASH_LENGTH:]
        connection.execute(update(AuditBatchRow).where(AuditBatchRow.number == batch["number"])
                           .values(records="\n".join(lines), hashes=hashes))


def test_verify_names_a_record_edited_in_the_database(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    for n in range(5):
        store.audit.append_batch(_batch(_records(f"r{n}"), n + 1))
    _edit_line(store, 8, '"tokens_out":5', '"tokens_out":1')
    verdict = store.audit.verify()
    assert not verdict.ok and verdict.first_broken_seq == 8 and verdict.rows == 8
    assert "row 8" in verdict.message and "changed" in verdict.message


def test_verify_names_the_record_after_one_edited_with_its_hash_recomputed(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    store.audit.append_batch(_batch([*_records("r1"), *_records("r2")], 1))
    _edit_line(store, 2, '"status":200', '"status":500', rehash=True)
    verdict = store.audit.verify()
    assert verdict.first_broken_seq == 3 and "the one before it was changed" in verdict.message


def test_verify_names_a_batch_whose_link_was_cut(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    for n in range(3):
        store.audit.append_batch(_batch(_records(f"r{n}"), n + 1))
    with store.engine.begin() as connection:  # the middle batch removed: the last one no longer links
        connection.execute(text("DELETE FROM audit_batches WHERE number = 2"))
    verdict = store.audit.verify()
    assert verdict.first_broken_seq == 5 and "link" in verdict.message


def test_verify_reads_the_chain_in_pages(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    for n in range(VERIFY_PAGE + 3):
        store.audit.append_batch(_batch(_records(f"r{n}", at=1000.0 + n), n + 1))
    verdict = store.audit.verify()
    assert verdict.ok and verdict.rows == 2 * (VERIFY_PAGE + 3)


def test_two_stores_appending_at_once_never_fork_the_chain(store_url: str, tmp_path: Path) -> None:
    one, two = _store(store_url, tmp_path), _store(store_url, tmp_path)  # two API processes' stores

    def append(n: int) -> None:
        (one if n % 2 else two).audit.append_batch(_batch(_records(f"r{n}", at=1000.0 + n), n + 1))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(append, range(40)))
    rows = one.audit.list(limit=1000)
    assert [r.seq for r in rows] == list(range(1, 81))
    assert len({r.prev_hash for r in rows}) == 80  # no two rows claim the same predecessor
    assert one.audit.verify().ok and two.audit.verify().rows == 80


def test_a_chain_stored_a_row_a_record_moves_into_batches_and_back(store_url: str, tmp_path: Path) -> None:
    store = _store(store_url, tmp_path)
    for n in range(3):
        store.audit.append_batch(_batch(_records(f"r{n}", key="k-1"), n + 1))
    before = store.audit.list()
    with store.engine.begin() as connection:
        command.downgrade(schema.alembic_config(connection), "0007")
    with store.engine.connect() as connection:
        stored = connection.execute(text("SELECT seq, prev_hash, hash FROM audit_rows ORDER BY seq")).all()
    assert [tuple(row) for row in stored] == [(r.seq, r.prev_hash, r.hash) for r in before]
    schema.upgrade_to_head(store.engine)  # migration 0008: the rows move into batches, hashes as they were
    assert store.audit.list() == before and store.audit.verify().rows == 6
    assert store.audit.key_requests("k-1").made == 3
    store.audit.append_batch(_batch(_records("r9"), 4))  # the chain goes on from the moved tip
    assert store.audit.verify().ok and store.audit.list()[-2].prev_hash == before[-1].hash
