"""Policies and quotas (issue 34): `policies`, one row per user, group or organization policy — its allow-lists,
deploy hours and GPU/copy quota as JSON — and who set it when (server/store/policies.py).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policies",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("rules", sa.JSON, nullable=False),
        sa.Column("set_by", sa.String(128), nullable=False),
        sa.Column("set_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("policies")
