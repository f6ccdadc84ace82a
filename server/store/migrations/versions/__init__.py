"""One Alembic revision per schema change, oldest first (each names the one before it)."""
