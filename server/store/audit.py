"""The audit chain in the store: append the endpoint proxy's records in order, each row's hash linking to
the one before; list them (bounded); verify the chain by recomputing every hash and link.

hash = SHA-256(prev_hash + canonical JSON of the row's fields, seq included), hex; the first row's
prev_hash is 64 zeros. Appending is serialised like placements (server/store/placement.py): a lock in the
process, then an UPDATE of the `audit` row of `store_locks` first (a row lock on PostgreSQL, the write lock
on SQLite), so two API processes never read the same tip and fork the chain. A record already in the chain
(same request id and phase: a batch retried after its answer was lost) is skipped, so retries are safe.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]  # the C encoder json.dumps uses
from typing import Any

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

from berth.contracts import MAX_AUDIT_LIST, AuditAppended, AuditRecord, AuditRow, AuditVerdict, KeyRequests
from berth.contracts.audit import AuditPhase
from server.store.tables import AuditChainRow, StoreLockRow

GENESIS = "0" * 64  # the first row's prev_hash
VERIFY_PAGE = 1000  # rows read at a time by verify(): memory stays bounded whatever the chain's length
AUDIT_TABLE: Table = AuditChainRow.__table__  # type: ignore[assignment]  # a declarative class's Table
FIELDS = ("seq", "at", "phase", "request_id", "status", "tokens_in", "tokens_out", "key_id", "user",
          "endpoint_id", "copy_id", "latency_ms")
INSERTED = (*FIELDS, "prev_hash", "hash")  # an appended row's columns, in the order append_batch builds them
# append_batch's reads: what of a batch is in the chain already (by request id alone: the unique (request_id, phase)
# index serves it on both databases), and the chain's tip.
PRESENT = (select(AuditChainRow.request_id, AuditChainRow.phase)
           .where(AuditChainRow.request_id.in_(bindparam("requests", expanding=True))))
TIP = select(AuditChainRow.seq, AuditChainRow.hash).order_by(AuditChainRow.seq.desc()).limit(1)


def canonical(fields: dict[str, Any]) -> str:
    """The row's fields as one JSON text: sorted keys, no spaces, ASCII, numbers as their type says (a
    float read back from either database is the same double, so its text is the same)."""
    typed = {**fields, "seq": int(fields["seq"]), "at": float(fields["at"]), "status": int(fields["status"]),
             "tokens_in": int(fields["tokens_in"]), "tokens_out": int(fields["tokens_out"]),
             "latency_ms": float(fields["latency_ms"])}
    return json.dumps({name: typed[name] for name in FIELDS}, sort_keys=True, separators=(",", ":"))


def _text(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def record_canonical(seq: int, record: AuditRecord) -> str:
    """`canonical` of a new row, written out in the sorted key order: a third of json.dumps's cost, the same
    text (a test holds the two equal over generated records; a float json.dumps would spell as NaN or Infinity
    takes its path)."""
    at, latency = float(record.at), float(record.latency_ms)
    if not (math.isfinite(at) and math.isfinite(latency)):
        return canonical({"seq": seq, **record.model_dump(mode="json")})
    return (f'{{"at":{at!r},"copy_id":{_text(record.copy_id)},"endpoint_id":{_text(record.endpoint_id)},'
            f'"key_id":{_text(record.key_id)},"latency_ms":{latency!r},"phase":{_text(record.phase.value)},'
            f'"request_id":{_text(record.request_id)},"seq":{int(seq)},"status":{int(record.status)},'
            f'"tokens_in":{int(record.tokens_in)},"tokens_out":{int(record.tokens_out)},'
            f'"user":{_text(record.user)}}}')


def row_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical(fields)).encode()).hexdigest()


class AuditChain:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._insert: _Insert | None = None

    def append_batch(self, records: Iterable[AuditRecord]) -> AuditAppended:
        """Add the records to the chain's end, in the order given, in one transaction."""
        batch = _unique(records)
        if not batch:
            return AuditAppended(appended=0)
        with self._lock, self._session() as s:
            s.execute(update(StoreLockRow).where(StoreLockRow.name == "audit").values(holder=StoreLockRow.holder)
                      .execution_options(synchronize_session=False))
            connection = s.connection()
            if self._insert is None:  # a store has one engine, so one dialect
                self._insert = _Insert.compile(connection.dialect)
            requests = sorted({request_id for request_id, _ in batch})
            present = set(connection.execute(PRESENT, {"requests": requests}).all())
            tip = connection.execute(TIP).first()
            seq, prev_hash = (tip[0], tip[1]) if tip is not None else (0, GENESIS)
            rows = []
            for key, record in batch.items():
                if key in present:
                    continue
                seq += 1
                digest = hashlib.sha256((prev_hash + record_canonical(seq, record)).encode()).hexdigest()
                rows.append((seq, record.at, key[1], record.request_id, record.status, record.tokens_in,
                             record.tokens_out, record.key_id, record.user, record.endpoint_id, record.copy_id,
                             record.latency_ms, prev_hash, digest))
                prev_hash = digest
            if rows:
                # The driver's own executemany on a statement compiled once: SQLAlchemy's per-row parameter
                # processing was a third of a row's cost (and the ORM's bulk path more).
                connection.exec_driver_sql(self._insert.sql, self._insert.parameters(rows))
        return AuditAppended(appended=len(rows), duplicates=len(batch) - len(rows))

    def list(self, endpoint_id: str | None = None, key_id: str | None = None, user: str | None = None,
             since: float | None = None, limit: int = 100) -> list[AuditRow]:
        """The newest `limit` rows (at most MAX_AUDIT_LIST) that match, in chain order."""
        query = select(AuditChainRow).order_by(AuditChainRow.seq.desc()).limit(max(1, min(limit, MAX_AUDIT_LIST)))
        if endpoint_id is not None:
            query = query.where(AuditChainRow.endpoint_id == endpoint_id)
        if key_id is not None:
            query = query.where(AuditChainRow.key_id == key_id)
        if user is not None:
            query = query.where(AuditChainRow.user == user)
        if since is not None:
            query = query.where(AuditChainRow.at >= since)
        with self._session() as s:
            rows = [AuditRow.model_validate(row, from_attributes=True) for row in s.scalars(query).all()]
        return rows[::-1]

    def key_requests(self, key_id: str) -> KeyRequests:
        """How many requests a key made (ATTEMPT rows) and how many were answered below 400 (SUCCESS): the
        chain sees every request whatever the key's limits, so a key without a quota is counted too."""
        query = (select(AuditChainRow.phase, func.count()).where(AuditChainRow.key_id == key_id)
                 .where(AuditChainRow.phase.in_((AuditPhase.ATTEMPT.value, AuditPhase.SUCCESS.value)))
                 .group_by(AuditChainRow.phase))
        with self._session() as s:
            counts = {str(phase): int(count) for phase, count in s.execute(query).all()}
        return KeyRequests(made=counts.get(AuditPhase.ATTEMPT.value, 0),
                           answered=counts.get(AuditPhase.SUCCESS.value, 0))

    def verify(self) -> AuditVerdict:
        """Recompute every row's hash and its link to the row before, page by page; name the first row
        that does not hold."""
        expected_prev, checked = GENESIS, 0
        for row in self._rows():
            checked += 1
            fields = {name: row[name] for name in FIELDS}
            if row["prev_hash"] != expected_prev:
                return _broken(row["seq"], checked, "its link to the row before does not hold (that row was "
                                                    "changed, removed or inserted)")
            if row_hash(row["prev_hash"], fields) != row["hash"]:
                return _broken(row["seq"], checked, "its fields do not match its hash (the row was changed)")
            expected_prev = row["hash"]
        return AuditVerdict(ok=True, rows=checked, message=f"The audit chain holds: {checked} row(s) verified.")

    def _rows(self) -> Iterator[dict[str, Any]]:
        columns = [getattr(AuditChainRow, name) for name in (*FIELDS, "prev_hash", "hash")]
        after = 0
        while True:
            with self._session() as s:
                page = s.execute(select(*columns).where(AuditChainRow.seq > after)
                                 .order_by(AuditChainRow.seq).limit(VERIFY_PAGE)).mappings().all()
            if not page:
                return
            for row in page:
                yield dict(row)
            after = page[-1]["seq"]


@dataclass(frozen=True)
class _Insert:
    """append_batch's INSERT as the store's driver takes it, in the driver's own parameter style."""

    sql: str
    positional: bool

    @classmethod
    def compile(cls, dialect: Dialect) -> _Insert:
        compiled = insert(AUDIT_TABLE).values({name: bindparam(name) for name in INSERTED}).compile(dialect=dialect)
        if compiled.positional and tuple(compiled.positiontup or ()) != INSERTED:
            raise RuntimeError(f"the audit INSERT's parameters came out as {compiled.positiontup}")
        return cls(str(compiled), bool(compiled.positional))

    def parameters(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]] | list[dict[str, Any]]:
        if self.positional:
            return rows
        return [dict(zip(INSERTED, row, strict=True)) for row in rows]


def _unique(records: Iterable[AuditRecord]) -> dict[tuple[str, str], AuditRecord]:
    """The batch keyed by (request id, phase), first occurrence kept, order kept."""
    batch: dict[tuple[str, str], AuditRecord] = {}
    for record in records:
        batch.setdefault((record.request_id, record.phase.value), record)
    return batch


def _broken(seq: int, checked: int, why: str) -> AuditVerdict:
    return AuditVerdict(ok=False, rows=checked, first_broken_seq=seq,
                        message=f"The audit chain is broken at row {seq}: {why}.")
