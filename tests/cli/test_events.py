"""`berth events` against a real API on loopback: the table, `-o json` as the API sent it, the filters, a kind refused
in one line before any call; and `--follow`: the newest events, then each new one as it is recorded (the follow loop
driven with a pause that records the next event, so no test waits on a clock), ended by --max-events or Ctrl-C."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from berth.api_events import EventsApi
from berth.contracts import EventKind, EventRecord
from berth.security import Identity
from cli import events as events_cli
from cli.app import app
from server.app import build_context, create_app
from server.context import ServerContext
from server.events import Audience, EventDraft, record
from tests.cli.loopback_api import serve_api

pytestmark = pytest.mark.timeout(60)
ALICE = Identity(user="alice", groups=("team",), org="acme")


def _node_event(context: ServerContext, node_id: str, kind: EventKind = EventKind.NODE_JOINED) -> None:
    record(context.store, EventDraft(kind, f"node {node_id} {kind.value.split('.')[1]}", audience=Audience.everyone(),
                                     node_id=node_id))


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the events route never reaches Temporal
    _node_event(context, "node-1")
    _node_event(context, "node-2")
    record(context.store, EventDraft(EventKind.ADMIN_BACKUP, "admin took a backup", audience=Audience.of_user("admin"),
                                     actor="admin"))
    return context


@pytest.fixture
def served(context: ServerContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    with serve_api(context, context.signing.api_token(ALICE), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_events_print_a_table_and_json(served: ServerContext) -> None:
    code, out = _run("events")
    assert code == 0, out
    lines = [line for line in out.splitlines() if "node." in line]
    assert len(lines) == 2 and "node.joined" in lines[0] and "node-1" in lines[0] and "node node-1 joined" in lines[0]
    assert "backup" not in out  # alice is no administrator
    code, out = _run("events", "--node", "node-2", "--kind", "node", "--since", "1h", "-o", "json")
    page = json.loads(out)
    assert code == 0 and [(e["kind"], e["node_id"]) for e in page["events"]] == [("node.joined", "node-2")]
    assert page["next_after"] == page["events"][0]["id"] and page["more"] is False
    code, out = _run("events", "--since", "2999-01-01T00:00", "-o", "json")
    assert code == 0 and json.loads(out)["events"] == []


def test_a_message_in_brackets_prints_as_sent(served: ServerContext) -> None:
    record(served.store, EventDraft(EventKind.NODE_JOINED, "node [bold]x[/bold] joined", audience=Audience.everyone(),
                                    node_id="node-x"))
    for argv in (("events", "--node", "node-x"), ("events", "--node", "node-x", "-f", "--max-events", "1")):
        code, out = _run(*argv)
        assert code == 0 and "node [bold]x[/bold] joined" in out, out


def test_an_unknown_kind_is_one_line(served: ServerContext) -> None:
    code, out = _run("events", "--kind", "nodes")
    assert code == 1 and out.strip().startswith("error: 'nodes' is no event kind: give one of admin, budget, copy")


def test_follow_ends_after_max_events_and_prints_json_lines(served: ServerContext) -> None:
    code, out = _run("events", "--follow", "--max-events", "2")
    assert code == 0 and "node node-1 joined" in out and "node node-2 joined" in out
    code, out = _run("events", "-f", "--max-events", "1", "--limit", "1", "-o", "json")
    assert code == 0 and [json.loads(line)["node_id"] for line in out.splitlines()] == ["node-2"]


def test_ctrl_c_ends_a_follow_quietly(served: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    async def interrupted(*_args: Any, **_kwargs: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(events_cli, "follow_events", interrupted)
    code, out = _run("events", "--follow")
    assert (code, out) == (0, "")


async def test_follow_shows_each_new_event_once_as_it_is_recorded(context: ServerContext) -> None:
    shown: list[EventRecord] = []
    pauses: list[float] = []
    arriving = iter(["node-3", "node-4", "node-5"])

    async def pause(seconds: float) -> None:
        """Time passes: the next node joins (two at once, the second time)."""
        pauses.append(seconds)
        _node_event(context, next(arriving))
        if len(pauses) == 2:
            _node_event(context, next(arriving))

    transport = httpx.ASGITransport(app=create_app(context))
    async with EventsApi("http://api", context.signing.api_token(ALICE), transport=transport) as api:
        count = await events_cli.follow_events(api, {"kind": "node"}, shown.append, limit=1, interval_s=2.5,
                                               max_events=4, sleep=pause)
    assert count == 4 and [e.node_id for e in shown] == ["node-2", "node-3", "node-4", "node-5"]
    assert pauses == [2.5, 2.5]
    assert all(event.at <= time.time() for event in shown)
