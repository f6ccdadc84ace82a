"""The store's schema: bring a database to the newest migration (server/store/migrations/) when a Store opens.

A fresh database is created by the migrations; one from before them (tables, no `alembic_version`) is
adopted by the baseline revision and upgraded, rows kept. Several API processes may open one database at
the same moment: the upgrade runs under a lock (a Postgres advisory lock inside the migration's
transaction; a file lock beside a SQLite file), so one migrates and the others find it done.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

MIGRATIONS = Path(__file__).with_name("migrations")
# pg_advisory_xact_lock's key: any constant other Berth code does not use ("berth" in ASCII).
MIGRATION_LOCK_KEY = 0x6265727468


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine) -> None:
    with _file_lock(engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        command.upgrade(alembic_config(connection), "head")


@contextlib.contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    """SQLite runs DDL outside a transaction (pysqlite), so a lock of the file's own cannot cover it."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
