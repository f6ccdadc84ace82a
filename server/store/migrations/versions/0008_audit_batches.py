"""The audit chain a batch a row (issue 33): `audit_batches` (a batch's records as canonical lines and their hashes)
and `audit_tallies` (per batch, minute, endpoint, copy, key and user: the records of each phase and their tokens)
take the place of `audit_rows`, one row a record (server/store/audit.py).

Rows already in the chain move into batches of up to 1,000, in chain order, each line the canonical text its hash
was computed from and each hash as it was stored: the chain is carried over, not re-hashed, so a row changed before
the move still fails verification after it. The downgrade spreads the batches back into rows.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

from server.store.audit_text import FIELDS, HASH_LENGTH, canonical

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

MOVED_WRITER = "migration-0008"  # the writer named by the batches the move made
MOVE_BATCH = 1000
ROW_INDEXES = ("at", "key_id", "user", "endpoint_id")
TALLY_INDEXES = ("minute", "endpoint_id", "key_id", "user")
PHASES = ("ATTEMPT", "SUCCESS", "FAILED")


def _row_columns() -> list[sa.Column[Any]]:
    return [sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("at", sa.Float, nullable=False), sa.Column("phase", sa.String(16), nullable=False),
            sa.Column("request_id", sa.String(128), nullable=False), sa.Column("status", sa.Integer, nullable=False),
            sa.Column("tokens_in", sa.BigInteger, nullable=False),
            sa.Column("tokens_out", sa.BigInteger, nullable=False),
            sa.Column("key_id", sa.String(128), nullable=True), sa.Column("user", sa.String(128), nullable=True),
            sa.Column("endpoint_id", sa.String(128), nullable=False),
            sa.Column("copy_id", sa.String(128), nullable=True), sa.Column("latency_ms", sa.Float, nullable=False),
            sa.Column("prev_hash", sa.String(64), nullable=False), sa.Column("hash", sa.String(64), nullable=False)]


def _batch_columns() -> list[sa.Column[Any]]:
    return [sa.Column("number", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("writer", sa.String(64), nullable=False),
            sa.Column("writer_batch", sa.BigInteger, nullable=False),
            sa.Column("first_seq", sa.BigInteger, nullable=False), sa.Column("count", sa.Integer, nullable=False),
            sa.Column("prev_hash", sa.String(64), nullable=False),
            sa.Column("tip_hash", sa.String(64), nullable=False),
            sa.Column("records", sa.Text, nullable=False), sa.Column("hashes", sa.Text, nullable=False)]


def _tally_columns() -> list[sa.Column[Any]]:
    return [sa.Column("batch", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("ordinal", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("minute", sa.BigInteger, nullable=False),
            sa.Column("endpoint_id", sa.String(128), nullable=False),
            sa.Column("copy_id", sa.String(128), nullable=True), sa.Column("key_id", sa.String(128), nullable=True),
            sa.Column("user", sa.String(128), nullable=True), sa.Column("attempts", sa.Integer, nullable=False),
            sa.Column("successes", sa.Integer, nullable=False), sa.Column("failures", sa.Integer, nullable=False),
            sa.Column("tokens_in", sa.BigInteger, nullable=False),
            sa.Column("tokens_out", sa.BigInteger, nullable=False)]


def upgrade() -> None:
    batches = op.create_table("audit_batches", *_batch_columns(),
                              sa.UniqueConstraint("writer", "writer_batch", name="uq_audit_batches_writer"))
    tallies = op.create_table("audit_tallies", *_tally_columns())
    for column in TALLY_INDEXES:
        op.create_index(f"ix_audit_tallies_{column}", "audit_tallies", [column])
    rows = sa.Table("audit_rows", sa.MetaData(), *_row_columns())
    connection = op.get_bind()
    for number, chunk in enumerate(_chunks(connection, rows), start=1):
        connection.execute(batches.insert(), _batch(number, chunk))
        connection.execute(tallies.insert(), _tallies(number, chunk))
    for column in ROW_INDEXES:
        op.drop_index(f"ix_audit_rows_{column}", "audit_rows")
    op.drop_table("audit_rows")


def _chunks(connection: sa.Connection, rows: sa.Table) -> Iterator[list[dict[str, Any]]]:
    after = 0
    while True:
        chunk = [dict(row) for row in connection.execute(
            sa.select(rows).where(rows.c.seq > after).order_by(rows.c.seq).limit(MOVE_BATCH)).mappings()]
        if not chunk:
            return
        yield chunk
        after = chunk[-1]["seq"]


def _batch(number: int, chunk: list[dict[str, Any]]) -> dict[str, Any]:
    return {"number": number, "writer": MOVED_WRITER, "writer_batch": number, "first_seq": chunk[0]["seq"],
            "count": len(chunk), "prev_hash": chunk[0]["prev_hash"], "tip_hash": chunk[-1]["hash"],
            "records": "\n".join(canonical({name: row[name] for name in FIELDS}) for row in chunk),
            "hashes": "".join(row["hash"] for row in chunk)}


def _tallies(number: int, chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
    counted: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in chunk:
        key = (int(row["at"] // 60), row["endpoint_id"], row["copy_id"], row["key_id"], row["user"])
        tally = counted.setdefault(key, {
            "batch": number, "ordinal": len(counted), "minute": key[0], "endpoint_id": key[1], "copy_id": key[2],
            "key_id": key[3], "user": key[4], "attempts": 0, "successes": 0, "failures": 0, "tokens_in": 0,
            "tokens_out": 0})
        column = {"ATTEMPT": "attempts", "SUCCESS": "successes"}.get(row["phase"], "failures")
        tally[column] += 1
        tally["tokens_in"] += row["tokens_in"]
        tally["tokens_out"] += row["tokens_out"]
    return list(counted.values())


def downgrade() -> None:
    rows = op.create_table("audit_rows", *_row_columns(),
                           sa.UniqueConstraint("request_id", "phase", name="uq_audit_rows_request_phase"))
    for column in ROW_INDEXES:
        op.create_index(f"ix_audit_rows_{column}", "audit_rows", [column])
    batches = sa.Table("audit_batches", sa.MetaData(), *_batch_columns())
    connection = op.get_bind()
    for batch in connection.execute(sa.select(batches).order_by(batches.c.number)).mappings().all():
        prev_hash, spread = batch["prev_hash"], []
        for index, text in enumerate(batch["records"].split("\n")):
            digest = batch["hashes"][index * HASH_LENGTH:(index + 1) * HASH_LENGTH]
            spread.append({**json.loads(text), "prev_hash": prev_hash, "hash": digest})
            prev_hash = digest
        connection.execute(rows.insert(), spread)
    for column in TALLY_INDEXES:
        op.drop_index(f"ix_audit_tallies_{column}", "audit_tallies")
    op.drop_table("audit_tallies")
    op.drop_table("audit_batches")
