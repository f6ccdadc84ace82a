"""The store's schema migrations (Alembic): `env.py`, and one revision per schema change in `versions/`.
`server/schema.py` runs them when a Store opens; a new table or column is a new revision (docs/store.md)."""
