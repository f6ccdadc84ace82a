"""How fresh each copy's /metrics figures are at the endpoint proxy that last reported them (issue 34, explain
routing's "metrics stale > 30 s, failed scrape"): `copy_scrapes`, one row a copy, its last good and failed scrape
and when it was reported, all on the API's clock (server/store/copy_scrapes.py).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "copy_scrapes",
        sa.Column("copy_id", sa.String(160), primary_key=True),
        sa.Column("scraped_at", sa.Float, nullable=True),
        sa.Column("failed_at", sa.Float, nullable=True),
        sa.Column("reported_at", sa.Float, nullable=False),
    )
    op.create_index("ix_copy_scrapes_reported_at", "copy_scrapes", ["reported_at"])


def downgrade() -> None:
    op.drop_index("ix_copy_scrapes_reported_at", "copy_scrapes")
    op.drop_table("copy_scrapes")
