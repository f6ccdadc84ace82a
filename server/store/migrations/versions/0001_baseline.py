"""Baseline: the store's schema as Berth made it before it had migrations (create_all at b048f25).

A database from before migrations has no `alembic_version` table; upgrading it starts here too. This
revision creates only the tables such a database lacks and adds the nullable columns an older release
did not have yet (what `add_new_columns` did at every start then), so every old state dir or database
arrives at the baseline with its rows kept. The tables are a frozen copy: later revisions change them,
never this file, and `server/store/tables/` is compared with the result in tests/server/store/test_migrations.py.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import JSON, Boolean, Column, Float, Integer, String, Text, UniqueConstraint

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None



def baseline_tables() -> sa.MetaData:
    metadata = sa.MetaData()
    sa.Table("users", metadata, Column("name", String(128), primary_key=True),
             Column("org", String(128), nullable=False), Column("admin", Boolean, nullable=False),
             Column("created_at", Float, nullable=False))
    sa.Table("groups", metadata, Column("name", String(128), primary_key=True),
             Column("org", String(128), nullable=False))
    sa.Table("memberships", metadata, Column("user", String(128), primary_key=True),
             Column("group", String(128), primary_key=True))
    sa.Table("workflows", metadata, Column("id", String(128), primary_key=True),
             Column("entry", String(128), nullable=False), Column("owner", String(128), nullable=False),
             Column("org", String(128), nullable=False), Column("created_at", Float, nullable=False),
             Column("definition", Text, nullable=False), Column("values", Text, nullable=False),
             Column("endpoint_id", String(64), nullable=False), Column("stop_requested", Boolean, nullable=False))
    sa.Table("endpoints", metadata, Column("id", String(64), primary_key=True),
             Column("workflow_id", String(128), nullable=False, index=True),
             Column("service", String(64), nullable=False), Column("scope", String(32), nullable=False),
             Column("owner", String(128), nullable=False), Column("org", String(128), nullable=False),
             Column("groups", JSON, nullable=False), Column("model_id", String(256), nullable=True),
             Column("created_at", Float, nullable=False), Column("service_url", String(512), nullable=True),
             Column("annotations", JSON, nullable=False))
    sa.Table("replicas", metadata, Column("copy_id", String(160), primary_key=True),
             Column("endpoint_id", String(64), nullable=False, index=True),
             Column("workflow_id", String(128), nullable=False, index=True),
             Column("url", String(512), nullable=False), Column("ready", Boolean, nullable=False),
             Column("draining", Boolean, nullable=False), Column("updated_at", Float, nullable=False))
    sa.Table("nodes", metadata, Column("id", String(128), primary_key=True),
             Column("address", String(256), nullable=False), Column("engine", String(32), nullable=False),
             Column("labels", JSON, nullable=False), Column("taints", JSON, nullable=False),
             Column("gpus", JSON, nullable=False), Column("cpus", Integer, nullable=False),
             Column("memory_gb", Float, nullable=False), Column("draining", Boolean, nullable=False),
             Column("last_heartbeat", Float, nullable=False), Column("port_start", Integer, nullable=False),
             Column("port_end", Integer, nullable=False), Column("volumes", JSON, nullable=False))
    sa.Table("allocations", metadata, Column("id", Integer, primary_key=True, autoincrement=True),
             Column("node_id", String(128), nullable=False), Column("gpu_index", Integer, nullable=False),
             Column("copy_id", String(160), nullable=False, index=True), Column("fenced", Boolean, nullable=True),
             UniqueConstraint("node_id", "gpu_index"))
    sa.Table("ports", metadata, Column("id", Integer, primary_key=True, autoincrement=True),
             Column("node_id", String(128), nullable=False), Column("port", Integer, nullable=False),
             Column("owner", String(160), nullable=False, index=True), Column("fenced", Boolean, nullable=True),
             UniqueConstraint("node_id", "port"))
    sa.Table("reservations", metadata, Column("copy_id", String(160), primary_key=True),
             Column("workflow_id", String(128), nullable=False, index=True),
             Column("placement", JSON, nullable=False), Column("created_at", Float, nullable=False))
    sa.Table("secrets", metadata, Column("ref", String(300), primary_key=True),
             Column("scope", String(32), nullable=False), Column("owner", String(128), nullable=False),
             Column("name", String(128), nullable=False), Column("type", String(32), nullable=False),
             Column("ciphertext", Text, nullable=False), Column("created_at", Float, nullable=False),
             Column("created_by", String(128), nullable=True))
    sa.Table("api_tokens", metadata, Column("id", String(64), primary_key=True),
             Column("user", String(128), nullable=False, index=True), Column("kind", String(32), nullable=False),
             Column("note", String(200), nullable=False), Column("created_at", Float, nullable=False),
             Column("expires_at", Float, nullable=False), Column("minted_by", String(128), nullable=True),
             Column("revoked_at", Float, nullable=True, index=True), Column("revoked_by", String(128), nullable=True))
    sa.Table("token_cutoffs", metadata, Column("user", String(128), primary_key=True),
             Column("not_before", Float, nullable=False), Column("by", String(128), nullable=False))
    return metadata


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    existing = set(inspector.get_table_names())
    metadata = baseline_tables()
    missing = [table for table in metadata.sorted_tables if table.name not in existing]
    metadata.create_all(bind, tables=missing)  # with their indexes and unique constraints
    for table in metadata.sorted_tables:
        if table in missing:
            continue
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present and column.nullable:
                op.add_column(table.name, Column(column.name, column.type, nullable=True))


def downgrade() -> None:
    baseline_tables().drop_all(op.get_bind())
