"""Fixtures of the store's tests: a real PostgreSQL for the session (stack/postgres.py), and
`store_url`, which runs a test on SQLite and again on PostgreSQL (marked `postgres`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stack.postgres import PostgresInstance, remove_instance, start_instance


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresInstance]:
    tmp_dir = Path(tmp_path_factory.mktemp("postgres"))
    instance = start_instance(tmp_dir)
    try:
        yield instance
    finally:
        remove_instance(instance, tmp_dir)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'berth.db'}"
    instance: PostgresInstance = request.getfixturevalue("postgres")
    return instance.create_database()
