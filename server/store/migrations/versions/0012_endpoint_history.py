"""An endpoint's history (issue 34, the console's endpoint chart): `audit_tallies.latency_buckets`, the latency
histogram of a tally's answered requests (server/store/latency_buckets.py), and `ready_copy_samples`, a pool
endpoint's ready copies once a minute as the autoscaler saw them (server/store/endpoint_history.py). Tallies written
before hold no histogram: their minutes show requests and failures but no latency.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_tallies") as table:
        table.add_column(sa.Column("latency_buckets", sa.Text, nullable=True))
    op.create_table(
        "ready_copy_samples",
        sa.Column("endpoint_id", sa.String(64), primary_key=True),
        sa.Column("minute", sa.BigInteger, primary_key=True, autoincrement=False, index=True),
        sa.Column("ready", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ready_copy_samples")
    with op.batch_alter_table("audit_tallies") as table:
        table.drop_column("latency_buckets")
