"""`berth usage` against a real API on loopback over the scripted scenario (tests/server/usage_scenario.py): the
table with GPU-hours and the total, `-o json` as the API sent it, `-o csv` a row per key and period with exact
GPU-seconds; `berth usage budget set|list|remove`."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.security import Identity
from cli.app import app
from server.app import build_context
from server.context import ServerContext
from tests.cli.loopback_api import serve_api
from tests.server import usage_scenario as scenario

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
WINDOW = ("--since", "2026-01-01T00:00:00+00:00", "--until", "2026-01-01T02:00:00+00:00")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the usage routes never reach Temporal
    scenario.play(context.store)
    with serve_api(context, context.signing.api_token(ADMIN), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_usage_prints_a_table_json_and_csv(served: ServerContext) -> None:
    code, out = _run("usage", "--by", "org", *WINDOW)
    assert code == 0, out
    assert "Usage from 2026-01-01T00:00:00Z to 2026-01-01T02:00:00Z by org." in out
    acme = next(line for line in out.splitlines() if line.strip().startswith("acme") or "│ acme" in line)
    assert "3.833" in acme and "2.083" in acme  # 13,800 and 7,500 GPU-seconds, in GPU-hours
    assert "(no one)" in out
    assert "Total: gpu-h reserved 4.833, gpu-h ready 3.083, requests 6, failed 1, tokens in 126, tokens out 234" in out
    code, out = _run("usage", "--by", "workflow", *WINDOW, "-o", "json")
    answer = json.loads(out)
    assert code == 0 and {row["key"]: scenario.figures(row) for row in answer["rows"]} == scenario.BY_WORKFLOW
    code, out = _run("usage", "--period", "hour", *WINDOW, "-o", "csv")
    assert code == 0, out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["user", "period_start", "period_end", *scenario.FIGURES]
    got = {(row["period_start"], row["user"]): tuple(float(row[f]) for f in scenario.FIGURES) for row in rows}
    hour = {scenario.T0: "2026-01-01T00:00:00Z", scenario.T0 + scenario.HOUR: "2026-01-01T01:00:00Z"}
    assert got == {(hour[start], key): value for (start, key), value in scenario.BY_USER_HOURLY.items()}
    code, out = _run("usage", "--until", "yesterday")
    assert code == 1 and "--until 'yesterday' is neither a duration" in out


def test_budgets_are_set_listed_shown_and_removed(served: ServerContext) -> None:
    code, out = _run("usage", "budget", "set", "group", "team-b", "--tokens", "1000", "--gpu-hours", "2.5")
    assert code == 0 and "Budget set: group team-b, per month." in out, out
    code, out = _run("usage", "budget", "list")
    assert code == 0 and "team-b" in out and "/1000" in out and "/2.5" in out, out
    code, out = _run("usage", *WINDOW)
    assert code == 0 and "Budgets" in out and "team-b" in out, out
    code, out = _run("usage", "budget", "set", "group", "nobody", "--tokens", "1")
    assert code == 1 and "No group named 'nobody'" in out
    code, out = _run("usage", "budget", "remove", "group", "team-b")
    assert code == 0 and "Budget removed" in out
    code, out = _run("usage", "budget", "list", "-o", "json")
    assert code == 0 and json.loads(out) == []
