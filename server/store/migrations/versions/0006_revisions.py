"""Revisions and rollouts (issue 17): `workflow_revisions` (one row per revision of a workflow; revision 1
is its start) and the revision each published copy serves (`replicas.revision`), which the endpoint
proxy's traffic split goes by; `copy_outcomes`, how each copy answered the endpoint proxies (a canary's
health).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflow_revisions",
        sa.Column("workflow_id", sa.String(128), primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("values", sa.Text, nullable=False),
        sa.Column("by", sa.String(128), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("strategy", sa.JSON, nullable=False),
    )
    with op.batch_alter_table("replicas") as batch:  # SQLite adds a column in place; batch keeps both dialects
        batch.add_column(sa.Column("revision", sa.Integer, nullable=False, server_default="1"))
    op.create_table(
        "copy_outcomes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("endpoint_id", sa.String(64), nullable=False, index=True),
        sa.Column("copy_id", sa.String(160), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("errors", sa.BigInteger, nullable=False),
        sa.Column("ttft_sum_s", sa.Float, nullable=False),
        sa.Column("ttft_count", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("copy_outcomes")
    with op.batch_alter_table("replicas") as batch:
        batch.drop_column("revision")
    op.drop_table("workflow_revisions")
