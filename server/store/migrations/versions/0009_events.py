"""Cluster events (issue 34, "Events"): `events`, one row per thing that happened on the cluster — a workflow
started, a copy placed, a node gone offline, a key revoked — with who may read it; kept for a retention period and
a row bound (server/store/events.py). History, not desired state: no backup carries it.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("kind", sa.String(64), nullable=False, index=True),
        sa.Column("message", sa.String(300), nullable=False),
        sa.Column("workflow_id", sa.String(128), nullable=True, index=True),
        sa.Column("copy_id", sa.String(160), nullable=True, index=True),
        sa.Column("node_id", sa.String(128), nullable=True, index=True),
        sa.Column("endpoint_id", sa.String(64), nullable=True),
        sa.Column("actor", sa.String(128), nullable=True),
        sa.Column("owner", sa.String(128), nullable=True, index=True),
        sa.Column("org", sa.String(128), nullable=True),
        sa.Column("groups", sa.Text, nullable=False),
        sa.Column("scope", sa.String(32), nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("events")
