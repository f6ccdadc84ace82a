"""MIG slices as records (issue 36): `mig_slices` holds each slice of a node's GPU an administrator made, keyed by the
node and the GPU index placement gives the slice there (server/store/mig_slices.py).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mig_slices",
        sa.Column("node_id", sa.String(128), primary_key=True),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("gpu", sa.Integer, nullable=False),
        sa.Column("profile", sa.String(16), nullable=False),
        sa.Column("uuid", sa.String(64), nullable=True),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("uuid", name="uq_mig_slices_uuid"),
    )


def downgrade() -> None:
    op.drop_table("mig_slices")
