"""`berth endpoint generate-token|tokens|revoke-token` against a real API on loopback (issue 31, item 10):
generate-token's standard output is the token alone (scripts read it so), its id on standard error and in
`-o json`; `tokens` lists ids, never tokens, as a table and as `-o json`; `revoke-token` says what it did,
a second time that it was done already, and an unknown id is refused in one line."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from cli.app import app
from server.app import build_context
from server.context import ServerContext
from server.store.tables import EndpointRow
from tests.cli.loopback_api import serve_api


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the token routes never reach Temporal
    alice = context.store.ensure_user("alice", org="default", groups=["default"])
    with context.store.session() as s:
        s.add(EndpointRow(id="ep-a", workflow_id="wf", service="vllm", scope="group", owner="alice",
                          org="default", groups=["default"], created_at=time.time(), annotations={}))
    with serve_api(context, context.signing.api_token(alice), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> Result:
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})


def test_generate_list_and_revoke(served: ServerContext) -> None:
    minted = _run("endpoint", "generate-token", "ep-a", "--expiration", "1h", "--note", "nightly eval")
    assert minted.exit_code == 0, minted.output
    token = minted.stdout.strip()
    assert minted.stdout == token + "\n" and token.count(".") == 2  # the token alone: $(…) reads it
    token_id = minted.stderr.split("Token id ", 1)[1].split()[0]
    assert f"berth endpoint revoke-token ep-a {token_id}" in minted.stderr
    as_json = json.loads(_run("endpoint", "generate-token", "ep-a", "-o", "json").stdout)
    assert set(as_json) == {"endpoint_id", "token", "expires_at", "id"}

    listed = _run("endpoint", "tokens", "ep-a")
    assert listed.exit_code == 0 and token not in listed.stdout
    [row] = [line for line in listed.stdout.splitlines() if token_id in line]
    assert "alice" in row and "active" in row and "nightly eval" in row
    records = json.loads(_run("endpoint", "tokens", "ep-a", "-o", "json").stdout)
    assert [r["id"] for r in records] == [token_id, as_json["id"]] and token not in json.dumps(records)
    assert set(records[0]) == {"id", "endpoint_id", "user", "minted_by", "minted_at", "expires_at", "note",
                               "revoked", "revoked_at", "revoked_by"}

    revoked = _run("endpoint", "revoke-token", "ep-a", token_id)
    assert revoked.exit_code == 0 and f"Revoked token {token_id} of endpoint ep-a" in revoked.stdout
    again = _run("endpoint", "revoke-token", "ep-a", token_id, "-o", "json")
    assert json.loads(again.stdout)["already_revoked"] is True
    assert "was already revoked" in _run("endpoint", "revoke-token", "ep-a", token_id).stdout
    [row] = [line for line in _run("endpoint", "tokens", "ep-a").stdout.splitlines() if token_id in line]
    assert "revoked by alice" in row


def test_an_unknown_token_id_is_refused_in_one_line(served: ServerContext) -> None:
    refused = _run("endpoint", "revoke-token", "ep-a", "0123456789abcdef")
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "No token with id '0123456789abcdef' for endpoint ep-a" in refused.stderr
