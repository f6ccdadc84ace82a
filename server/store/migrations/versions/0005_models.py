"""The model registry (issue 16): `models` (one row per registered model and its current job),
`model_uses` (which running workflows serve which model) and the digests each node's cache holds
(`nodes.models`).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(32), nullable=False),
        sa.Column("owner_key", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("org", sa.String(128), nullable=False),
        sa.Column("groups", sa.JSON, nullable=False),
        sa.Column("source", sa.String(1024), nullable=False),
        sa.Column("repo", sa.String(256), nullable=True),
        sa.Column("revision", sa.String(128), nullable=True),
        sa.Column("path", sa.String(1024), nullable=True),
        sa.Column("commit", sa.String(64), nullable=True),
        sa.Column("digest", sa.String(64), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("retries", sa.Integer, nullable=False),
        sa.Column("require_checksum", sa.Boolean, nullable=False),
        sa.Column("signature", sa.String(64), nullable=True),
        sa.Column("license", sa.String(128), nullable=True),
        sa.Column("residency", sa.String(64), nullable=True),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("hf_token_secret", sa.String(300), nullable=True),
        sa.Column("allow_patterns", sa.JSON, nullable=True),
        sa.Column("ignore_patterns", sa.JSON, nullable=True),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("files", sa.Integer, nullable=False),
        sa.Column("safetensors_files", sa.Integer, nullable=False),
        sa.Column("verified", sa.Boolean, nullable=False),
        sa.Column("progress", sa.JSON, nullable=True),
        sa.Column("job_id", sa.String(128), nullable=True),
        sa.Column("job_kind", sa.String(32), nullable=True),
        sa.Column("job_started_at", sa.Float, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("materialized_at", sa.Float, nullable=True),
        sa.Column("verified_at", sa.Float, nullable=True),
        sa.Column("last_used_at", sa.Float, nullable=True),
        sa.UniqueConstraint("scope", "owner_key", "name", name="uq_models_scope_owner_name"),
    )
    op.create_index("ix_models_digest", "models", ["digest"])
    op.create_index("ix_models_job_id", "models", ["job_id"])
    op.create_table(
        "model_uses",
        sa.Column("model_id", sa.String(64), primary_key=True),
        sa.Column("workflow_id", sa.String(128), primary_key=True),
        sa.Column("since", sa.Float, nullable=False),
    )
    op.create_index("ix_model_uses_workflow_id", "model_uses", ["workflow_id"])
    with op.batch_alter_table("nodes") as batch:  # SQLite adds a column in place; batch keeps both dialects
        batch.add_column(sa.Column("models", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("models")
    op.drop_index("ix_model_uses_workflow_id", "model_uses")
    op.drop_table("model_uses")
    op.drop_index("ix_models_job_id", "models")
    op.drop_index("ix_models_digest", "models")
    op.drop_table("models")
