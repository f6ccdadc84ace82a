"""`berth policy set|show|list|remove` against a real API on loopback, as an administrator: a policy set with its
rules, shown and listed with what it counts in use (and `-o json` as the API sent it), removed; a bad rule is one
line before anything is sent."""

from __future__ import annotations

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

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the policy routes never reach Temporal
    context.store.ensure_user("alice", org="acme", groups=["ml-team"])
    with serve_api(context, context.signing.api_token(ADMIN), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_an_administrator_sets_shows_lists_and_removes_a_policy(served: ServerContext) -> None:
    code, out = _run("policy", "set", "group", "ml-team", "--entry", "GPT-OSS 20B", "--entry", "Qwen3-Coder 30B",
                     "--model-source", "hf://openai/", "--deploy-hours", "22:00-06:00", "--max-gpus", "8")
    assert code == 0, out
    assert ("Set policy group/ml-team: entries GPT-OSS 20B, Qwen3-Coder 30B; model sources hf://openai/; "
            "deploy hours 22:00-06:00; GPUs 0/8; copies 0/- (in use/max)") in out
    code, out = _run("policy", "show", "group", "ml-team")
    assert code == 0 and "group/ml-team: entries" in out and "(set by admin)" in out, out
    code, out = _run("policy", "list")
    row = next(line for line in out.splitlines() if "group/ml-team" in line)
    assert code == 0 and "22:00-06:00" in row and "0/8" in row and "admin" in row, out
    code, out = _run("policy", "list", "-o", "json")
    [policy] = json.loads(out)
    assert code == 0 and policy["rules"]["max_gpus"] == 8 and policy["in_use"] == {"gpus": 0, "copies": 0}
    code, out = _run("policy", "remove", "group", "ml-team")
    assert code == 0 and "Removed policy group/ml-team." in out
    code, out = _run("policy", "show", "group", "ml-team")
    assert code == 1 and "No policy for group 'ml-team'" in out


def test_a_bad_rule_is_one_line_and_sends_nothing(served: ServerContext) -> None:
    code, out = _run("policy", "set", "group", "ml-team", "--deploy-hours", "8am-6pm")
    assert code == 2 and "deploy_hours must read START-END in UTC hours" in out, out
    code, out = _run("policy", "set", "team", "ml-team", "--max-gpus", "1")
    assert code == 2 and "user, group, organization" in out.replace("'", "").replace("|", ", "), out
    code, out = _run("policy", "list")
    assert code == 0 and "ml-team" not in out
