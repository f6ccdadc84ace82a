"""The audit chain: `audit_rows` (one row per phase of a proxied request, each hash linking to the one
before) and the `audit` row of `store_locks`, which every appender updates first so that two API
processes never fork the chain (server/store/audit.py).

It follows the API keys' 0003 (the two touch different tables).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

INDEXED = ("at", "key_id", "user", "endpoint_id")


def upgrade() -> None:
    op.create_table(
        "audit_rows",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("tokens_in", sa.BigInteger, nullable=False),
        sa.Column("tokens_out", sa.BigInteger, nullable=False),
        sa.Column("key_id", sa.String(128), nullable=True),
        sa.Column("user", sa.String(128), nullable=True),
        sa.Column("endpoint_id", sa.String(128), nullable=False),
        sa.Column("copy_id", sa.String(128), nullable=True),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.UniqueConstraint("request_id", "phase", name="uq_audit_rows_request_phase"),
    )
    for column in INDEXED:
        op.create_index(f"ix_audit_rows_{column}", "audit_rows", [column])
    locks = sa.table("store_locks", sa.column("name", sa.String))
    op.bulk_insert(locks, [{"name": "audit"}])


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM store_locks WHERE name = 'audit'"))
    for column in INDEXED:
        op.drop_index(f"ix_audit_rows_{column}", "audit_rows")
    op.drop_table("audit_rows")
