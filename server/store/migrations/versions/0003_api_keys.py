"""API keys: `bk_…` keys scoped to an endpoint (and a model), stored as HMAC-SHA256 under the server
secret, with their lifetime request quota counted in the row (issue 15).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("org", sa.String(128), nullable=False),
        sa.Column("groups", sa.JSON, nullable=False),
        sa.Column("endpoint_id", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("previous_hash", sa.String(64), nullable=True),
        sa.Column("previous_valid_until", sa.Float, nullable=True),
        sa.Column("request_quota", sa.BigInteger, nullable=True),
        sa.Column("requests_used", sa.BigInteger, nullable=False),
        sa.Column("tokens_per_minute", sa.Integer, nullable=True),
        sa.Column("max_concurrent", sa.Integer, nullable=True),
    )
    op.create_index("ix_api_keys_prefix", "api_keys", ["prefix"], unique=True)
    op.create_index("ix_api_keys_owner", "api_keys", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_owner", "api_keys")
    op.drop_index("ix_api_keys_prefix", "api_keys")
    op.drop_table("api_keys")
