"""`berth workflow update|revisions|get --revision` against a real API on loopback (no Temporal: the
answers that need none), the refusals made before any call, and the options added to existing commands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from server.app import build_context
from server.context import ServerContext
from server.submission import StartRequest, new_rows, prepare, with_generated_keys
from tests.cli.loopback_api import serve_api

ENTRY = "SmolLM2 135M Instruct"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ServerContext, str]]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "vllm-cpu", "cpus": 8,
                                            "memory_gb": 32, "gpus": []}, port_start=30000)
    alice = context.store.ensure_user("alice", org="default", groups=["default"])
    values = {"MaxContextSize": 4096}
    entry, definition = prepare(context, StartRequest(entry=ENTRY, values=values), alice)
    definition = with_generated_keys(definition)
    row, endpoint = new_rows(entry, definition, alice)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    context.store.revisions.add_revision(row.id, 1, definition.model_dump(mode="json"), values, "alice")
    with serve_api(context, context.signing.api_token(alice), tmp_path, monkeypatch):
        yield context, row.id


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_equal_values_roll_nothing_and_the_revisions_list(served: tuple[ServerContext, str]) -> None:
    _context, workflow_id = served
    code, out = _run("workflow", "update", workflow_id, "--values", "MaxContextSize=4096")
    assert code == 0 and "nothing to change: the values equal revision 1's" in out, out
    code, out = _run("workflow", "revisions", workflow_id, "-o", "json")
    assert code == 0, out
    [first] = json.loads(out)
    assert (first["revision"], first["by"], first["values"]) == (1, "alice", {"MaxContextSize": 4096})
    code, out = _run("workflow", "revisions", workflow_id)
    assert code == 0 and "REVISION" in out and "MaxContextSize=4096" in out, out
    code, out = _run("workflow", "get", workflow_id, "--revision", "1")
    assert code == 0 and "revision: 1" in out and "max_model_len: 4096" in out, out
    code, out = _run("workflow", "get", workflow_id, "--revision", "3")
    assert code == 1 and "has no revision 3. Its revisions: 1." in out, out


def test_a_change_no_rollout_can_make_is_refused_in_one_line(served: tuple[ServerContext, str]) -> None:
    _context, workflow_id = served
    code, out = _run("workflow", "update", workflow_id, "--values", "Proxy=false")
    assert code == 1 and "Proxy cannot change in a rollout" in out, out
    code, out = _run("workflow", "update", workflow_id, "--values", "MaxContextSize=2048", "--strategy", "canary")
    assert code == 1 and "use --strategy rolling or blue-green" in out, out


@pytest.mark.parametrize(("argv", "line"), [
    (["--values", "noequals"], "--values entry 'noequals' is not KEY=VALUE."),
    (["--values", "A=1", "--steps", "5,x"], "--steps takes percentages separated by commas"),
    (["--values", "A=1", "--steps", "50,20"], "--steps: percentages from 1 to 100, each above the one before"),
    (["--values", "A=1", "--max-surge", "0"], "--max-surge: Input should be greater than or equal to 1."),
])
def test_update_refuses_before_calling(argv: list[str], line: str) -> None:
    code, out = _run("workflow", "update", "wf", *argv)
    assert code == 1 and line in out, out


@pytest.mark.parametrize(("path", "option"), [
    (["workflow", "get"], "--revision"), (["node", "drain"], "--grace-seconds"),
    (["workflow", "drain"], "--grace-seconds"), (["workflow", "update"], "--rollback-window-seconds"),
    (["workflow", "rollout", "promote"], "--output"),
])
def test_the_new_options_are_in_the_help(path: list[str], option: str) -> None:
    code, out = _run(*path, "--help")
    assert code == 0 and option in out, out
