"""Usage and chargeback (issue 34): `copy_spans` (one row a placement of a copy: reserved, first ready and released
times, GPUs, workflow, endpoint, owner and organization), what GPU-seconds reserved and ready are summed from once
the reservation itself is gone; `usage_budgets` (token and GPU-hour budgets per organization or group and period)
and `usage_alerts` (a budget seen exceeded in a period, so its event is raised once).

Copies placed before this revision have no span: their GPU-seconds start counting at their next placement.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

SPAN_INDEXES = ("copy_id", "workflow_id", "owner", "reserved_at", "released_at")


def upgrade() -> None:
    op.create_table(
        "copy_spans",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("copy_id", sa.String(160), nullable=False),
        sa.Column("workflow_id", sa.String(128), nullable=False),
        sa.Column("endpoint_id", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("org", sa.String(128), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("reserved_at", sa.Float, nullable=False),
        sa.Column("ready_at", sa.Float, nullable=True),
        sa.Column("released_at", sa.Float, nullable=True),
    )
    for column in SPAN_INDEXES:
        op.create_index(f"ix_copy_spans_{column}", "copy_spans", [column])
    op.create_table(
        "usage_budgets",
        sa.Column("scope", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("period", sa.String(16), primary_key=True),
        sa.Column("tokens", sa.BigInteger, nullable=True),
        sa.Column("gpu_hours", sa.Float, nullable=True),
        sa.Column("set_by", sa.String(128), nullable=False),
        sa.Column("set_at", sa.Float, nullable=False),
    )
    op.create_table(
        "usage_alerts",
        sa.Column("scope", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("period", sa.String(16), primary_key=True),
        sa.Column("period_start", sa.Float, primary_key=True),
        sa.Column("figure", sa.String(16), primary_key=True),
        sa.Column("at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_alerts")
    op.drop_table("usage_budgets")
    for column in SPAN_INDEXES:
        op.drop_index(f"ix_copy_spans_{column}", "copy_spans")
    op.drop_table("copy_spans")
