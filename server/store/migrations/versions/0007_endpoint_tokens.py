"""Endpoint tokens (issue 31, item 10): `endpoint_tokens`, one row per endpoint token minted (its id, never
the token), so that `berth endpoint tokens` lists them and `berth endpoint revoke-token` ends one; the
endpoint proxies refuse the revoked ids the routes table carries (server/store/endpoint_tokens.py).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "endpoint_tokens",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("endpoint_id", sa.String(64), nullable=False, index=True),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("minted_by", sa.String(128), nullable=False),
        sa.Column("note", sa.String(200), nullable=False),
        sa.Column("minted_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False, index=True),
        sa.Column("revoked_at", sa.Float, nullable=True, index=True),
        sa.Column("revoked_by", sa.String(128), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("endpoint_tokens")
