"""Placement at scale (issue 36): each API process keeps an inventory of the nodes for placement and re-reads only
what changed (server/store/placement_view.py). `store_locks.generation` (on the `placement` row) counts the
transactions that took the placement lock; `nodes.generation` is the one that last changed what placement reads of
the node (its GPUs, taints, volumes, cached models, draining, the GPUs held on it), so a view at generation G re-reads
the nodes above G. `nodes.last_heartbeat` gains an index: each reservation asks which nodes are offline now.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:  # SQLite adds a column in place; batch keeps both dialects
        batch.add_column(sa.Column("generation", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_nodes_generation", "nodes", ["generation"])
    op.create_index("ix_nodes_last_heartbeat", "nodes", ["last_heartbeat"])
    with op.batch_alter_table("store_locks") as batch:
        batch.add_column(sa.Column("generation", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("store_locks") as batch:
        batch.drop_column("generation")
    op.drop_index("ix_nodes_last_heartbeat", "nodes")
    op.drop_index("ix_nodes_generation", "nodes")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("generation")
