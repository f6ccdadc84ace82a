"""The store's schema migrations, on SQLite and on a real PostgreSQL: a new database opens at the head
revision with exactly the tables server/store/tables/ declares; a database made by the last release without
migrations (b048f25, frozen in store_b048f25/) upgrades in place with every row kept; several processes
opening one new database at once migrate it once; and the revisions go down and up again."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from berth.api_keys import KeyHasher
from berth.contracts import KeyCreateRequest, ReserveRequest
from berth.security import Cipher, Identity
from server.store import schema
from server.store.api_keys import ApiKeys
from server.store.database import Store
from server.store.tables import ApiTokenRow, Base, SecretRow, TokenCutoffRow

FROZEN = Path(__file__).with_name("store_b048f25")
pytestmark = pytest.mark.timeout(120)


def _statements(path: Path) -> list[str]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("--")]
    return [statement.strip() for statement in "\n".join(lines).split(";") if statement.strip()]


def _make_b048f25_database(url: str) -> None:
    """What today's main left in a state dir or database: its create_all schema and rows, no alembic_version."""
    engine = create_engine(url)
    dialect = "postgresql" if engine.dialect.name == "postgresql" else "sqlite"
    with engine.begin() as connection:
        for statement in _statements(FROZEN / f"{dialect}.sql") + _statements(FROZEN / "rows.sql"):
            connection.execute(text(statement))
    engine.dispose()


def _open(url: str, tmp_path: Path) -> Store:
    return Store(url, Cipher.load_or_create(tmp_path / "keys"))


def test_a_new_store_is_at_head_with_the_models_tables(store_url: str, tmp_path: Path) -> None:
    store = _open(store_url, tmp_path)
    assert schema.current_revision(store.engine) == schema.head_revision()
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == [], "server/store/tables/ and server/store/migrations/ disagree: add a revision"


def test_a_database_made_by_b048f25_upgrades_in_place(store_url: str, tmp_path: Path) -> None:
    _make_b048f25_database(store_url)
    store = _open(store_url, tmp_path)
    assert schema.current_revision(store.engine) == schema.head_revision()
    # Every row is still there, read through the store as the API reads it.
    assert store.identity("alice").groups == ("team",) and store.identity("admin").admin
    workflow = store.workflow("wf-old")
    assert (workflow.owner, workflow.values, workflow.definition) == ("alice", "MinReplicas=1",
                                                                     "ciphertext-of-the-definition")
    endpoint = store.endpoint("ep-old")
    assert endpoint.groups == ["team"] and endpoint.annotations["max_replicas"] == 2
    assert [r.copy_id for r in store.replicas("ep-old")] == ["wf-old.copy-1"]
    assert [len(n.gpus) for n in store.nodes()] == [2]
    assert [(a.node_id, a.gpu_index) for a in store.placements.allocations()] == [("node-1", 0)]
    assert store.placements.reservations("wf-old")[0].placement["ranks"][0]["port"] == 30001
    with store.session() as s:
        assert s.get(SecretRow, "organization/acme/hf").created_by == "alice"  # type: ignore[union-attr]
        assert s.get(ApiTokenRow, "jti-old").note == "from before the upgrade"  # type: ignore[union-attr]
        assert s.get(TokenCutoffRow, "alice").by == "admin"  # type: ignore[union-attr]
    # The upgraded store works as a new one: the next placement takes the free GPU (ids continue on
    # Postgres' sequences), and the tables the migrations added take reports.
    store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "simulator",
                                    "gpus": [{"index": 0, "memory_gb": 80}, {"index": 1, "memory_gb": 80}]}, 30000)
    request = ReserveRequest(workflow_id="wf-new", copy_id="wf-new.copy-1", nodes=1, gpus_per_node=1)
    placed = store.placements.reserve(request)
    assert placed.placement is not None and placed.placement.ranks[0].gpus == (1,)
    store.load.add_front_door("ep-old", 3)
    assert [r.requests for r in store.load.window()] == [3]
    # API keys (revision 0003): issued, verified, and their quota reserved by the conditional UPDATE.
    keys = ApiKeys(store, KeyHasher(b"a test secret"))
    issued = keys.create(Identity("alice", ("team",), "default"),
                         KeyCreateRequest(name="k", endpoint_id="ep-old", request_quota=2), 60)
    assert keys.verify(issued.key, "ep-old", None).owner == "alice"
    assert [keys.reserve(issued.record.id, 5).granted for _ in range(3)] == [1, 1, 0]
    # Opening it again changes nothing.
    assert schema.current_revision(_open(store_url, tmp_path).engine) == schema.head_revision()


def test_stores_opening_one_new_database_at_once_migrate_it_once(store_url: str, tmp_path: Path) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_store() -> None:
        barrier.wait()
        try:
            _open(store_url, tmp_path)
        except BaseException as error:  # noqa: BLE001 — reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    engine = create_engine(store_url)
    assert schema.current_revision(engine) == schema.head_revision()
    with engine.connect() as connection:
        names = connection.execute(text("SELECT name FROM store_locks")).scalars().all()
    assert sorted(names) == ["audit", "autoscaler", "placement"]  # each seeded once


def test_the_revisions_go_down_and_up_again(store_url: str, tmp_path: Path) -> None:
    store = _open(store_url, tmp_path)
    store.load.add_front_door("ep", 1)
    with store.engine.begin() as connection:
        command.downgrade(schema.alembic_config(connection), "0001")
    assert "load_reports" not in inspect(store.engine).get_table_names()
    assert schema.current_revision(store.engine) == "0001"
    schema.upgrade_to_head(store.engine)
    assert schema.current_revision(store.engine) == schema.head_revision()
    assert store.load.window() == []
