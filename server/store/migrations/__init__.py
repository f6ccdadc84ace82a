"""The store's schema migrations (Alembic): `env.py`, and one revision per schema change in `versions/`.

`server/store/schema.py` runs them to the head whenever a Store opens. A change to server/store/tables/ comes with
a new revision (the next number, `down_revision` the current head), written by hand or started from
`alembic.command.revision(server.store.schema.alembic_config(), "what changed", rev_id="0003")`; the
baseline (0001) is frozen. tests/server/store/test_migrations.py fails while models and revisions differ.
"""
