"""`berth audit list|verify` against a real API on loopback: the rows as a table and as `-o json`, the
filters (`--since 1h` or an ISO time), and `verify` exiting 1 naming the first row edited in the store."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from berth.contracts import AuditBatch, AuditPhase, AuditRecord
from berth.security import Identity
from cli.app import app
from cli.audit import since_time
from server.app import build_context
from server.context import ServerContext
from server.store.tables import AuditBatchRow
from tests.cli.loopback_api import serve_api

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the audit routes never reach Temporal
    now = time.time()
    for n, (at, endpoint) in enumerate([(now - 7200, "ep-old"), (now - 60, "ep-1"), (now - 30, "ep-2")]):
        context.store.audit.append_batch(AuditBatch.of("proxy-a", n + 1, [
            AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id=f"r{n}", user="alice", endpoint_id=endpoint),
            AuditRecord(at=at + 0.1, phase=AuditPhase.FAILED, request_id=f"r{n}", status=502, user="alice",
                        endpoint_id=endpoint, latency_ms=100.0)]))
    with serve_api(context, context.signing.api_token(ADMIN), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_list_filters_and_prints_json(served: ServerContext) -> None:
    code, out = _run("audit", "list", "--since", "1h", "-o", "json")
    rows = json.loads(out)
    assert code == 0 and [(r["seq"], r["endpoint_id"], r["phase"]) for r in rows] == [
        (3, "ep-1", "ATTEMPT"), (4, "ep-1", "FAILED"), (5, "ep-2", "ATTEMPT"), (6, "ep-2", "FAILED")]
    assert set(rows[0]) >= {"prev_hash", "hash", "request_id", "status", "latency_ms", "key_id", "copy_id"}
    code, out = _run("audit", "list", "--endpoint", "ep-old", "--limit", "1")
    assert code == 0 and "ep-old" in out and "FAILED" in out and "ep-1" not in out


def test_verify_names_the_first_broken_row(served: ServerContext) -> None:
    code, out = _run("audit", "verify")
    assert code == 0 and "6 row(s) verified" in out
    with served.store.engine.begin() as connection:
        stored = connection.execute(select(AuditBatchRow.records).where(AuditBatchRow.number == 2)).scalar_one()
        # Row 4 is the second of batch 2, its only 502.
        edited = stored.replace('"status":502', '"status":200')
        connection.execute(update(AuditBatchRow).where(AuditBatchRow.number == 2).values(records=edited))
    code, out = _run("audit", "verify")
    assert code == 1 and "broken at row 4" in out
    code, out = _run("audit", "verify", "-o", "json")
    assert code == 1 and json.loads(out)["first_broken_seq"] == 4


def test_since_takes_a_duration_or_an_iso_time() -> None:
    assert since_time("1h", now=10_000.0) == 6400.0
    assert since_time("2026-01-31T12:00:00+00:00") == datetime.fromisoformat("2026-01-31T12:00:00+00:00").timestamp()
    code, out = _run("audit", "list", "--since", "yesterday")
    assert code == 1 and "--since 'yesterday' is neither a duration" in out
