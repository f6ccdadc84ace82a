"""Load reports in the store, and the store's named locks: the autoscaler leaves the API process.

`load_reports` holds what the endpoint proxy and LiteLLM report to any API replica, for the autoscaler's
window; `store_locks` holds the row a placement updates first (placements serialise across API processes)
and the autoscaler's lease (one autoscaler per stack, whatever the number of control workers).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "load_reports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("endpoint_id", sa.String(64), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("worker_pid", sa.Integer, nullable=True),
        sa.Column("worker_started_at", sa.Float, nullable=True),
        sa.Column("routed", sa.JSON, nullable=True),
    )
    op.create_index("ix_load_reports_endpoint_id", "load_reports", ["endpoint_id"])
    op.create_index("ix_load_reports_at", "load_reports", ["at"])
    locks = op.create_table(
        "store_locks",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=True),
        sa.Column("expires_at", sa.Float, nullable=True),
    )
    op.bulk_insert(locks, [{"name": "placement"}, {"name": "autoscaler"}])


def downgrade() -> None:
    op.drop_table("store_locks")
    op.drop_index("ix_load_reports_at", "load_reports")
    op.drop_index("ix_load_reports_endpoint_id", "load_reports")
    op.drop_table("load_reports")
