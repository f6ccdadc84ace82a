"""`berth endpoint policy show|set|clear` against a real API on loopback, as the endpoint's owner: set from a
YAML file and a TTL (what is not given is kept), show as text and `-o json`, a loosening refused in one
line, a bad file refused in one line before any call, and clear."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.contracts import LimitPolicy
from cli.app import app
from server.app import build_context
from server.context import ServerContext
from server.store.tables import EndpointRow
from tests.cli.loopback_api import serve_api


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the policy routes never reach Temporal
    context.limits = LimitPolicy.model_validate({"max_tokens": 4096})
    alice = context.store.ensure_user("alice", org="default", groups=["default"])
    with context.store.session() as s:
        s.add(EndpointRow(id="ep-a", workflow_id="wf", service="vllm", scope="group", owner="alice",
                          org="default", groups=["default"], created_at=time.time(), annotations={"pool": True}))
    with serve_api(context, context.signing.api_token(alice), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_set_show_and_clear(served: ServerContext, tmp_path: Path) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("max_tokens: 1024\nglobal: {requests_per_minute: 60}\n")
    code, out = _run("endpoint", "policy", "set", "ep-a", "--limits", str(limits))
    assert code == 0 and "max_tokens: 1024" in out, out
    code, out = _run("endpoint", "policy", "set", "ep-a", "--key-max-ttl", "7d", "-o", "json")
    assert code == 0 and json.loads(out) == {"limits": {"global": {"requests_per_minute": 60}, "max_tokens": 1024},
                                             "key_max_ttl": "7d"}  # the limits set before are kept
    code, out = _run("endpoint", "policy", "show", "ep-a")
    assert code == 0 and "Key max TTL: 7d" in out and "requests_per_minute: 60" in out
    assert served.store.endpoint("ep-a").annotations["pool"] is True
    code, out = _run("endpoint", "policy", "clear", "ep-a")
    assert code == 0 and "Cleared" in out
    assert json.loads(_run("endpoint", "policy", "show", "ep-a", "-o", "json")[1]) == {"limits": None,
                                                                                       "key_max_ttl": None}


def test_refusals_are_one_line(served: ServerContext, tmp_path: Path) -> None:
    looser = tmp_path / "looser.json"
    looser.write_text('{"max_tokens": 8192}')
    code, out = _run("endpoint", "policy", "set", "ep-a", "--limits", str(looser))
    assert code == 1 and out.count("\n") == 1 and "max_tokens: 8192 is looser than the cluster's 4096" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_tokens: lots\n")
    code, out = _run("endpoint", "policy", "set", "ep-a", "--limits", str(bad))
    assert code == 1 and out.count("\n") == 1 and f"--limits {bad}: max_tokens" in out
    code, out = _run("endpoint", "policy", "set", "ep-a", "--limits", str(tmp_path / "missing.yaml"))
    assert code == 1 and out.count("\n") == 1 and "cannot be read" in out
    code, out = _run("endpoint", "policy", "set", "ep-a", "--key-max-ttl", "soon")
    assert code == 1 and "--key-max-ttl 'soon' is not a duration" in out
    code, out = _run("endpoint", "policy", "set", "ep-a")
    assert code == 1 and "Give --limits FILE" in out
