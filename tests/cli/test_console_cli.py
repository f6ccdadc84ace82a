"""`berth console` against a real API on loopback: the console's URL, and a sign-in token for the caller that
the console accepts and `berth token list` shows with its note."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.security import API_AUDIENCE
from cli.app import app
from server.app import build_context
from server.context import ServerContext
from tests.cli.loopback_api import serve_api
from tests.console.app_support import browser, sign_in


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # minting a token never reaches Temporal
    bob = context.store.ensure_user("bob", org="default", groups=["default"])
    with serve_api(context, context.signing.api_token(bob), tmp_path, monkeypatch):
        yield context


def test_berth_console_prints_the_url_and_a_sign_in_token(served: ServerContext) -> None:
    result = CliRunner().invoke(app, ["console", "--expiration", "1h"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("Console  http://127.0.0.1:") and "/ui" in lines[0] and "lapses in 1h" in lines[0]
    token = lines[-1]
    claims = served.verifier.verify(token, API_AUDIENCE)
    assert claims["sub"] == "bob" and claims["exp"] - claims["iat"] == 3600
    assert any(record.note == "console sign-in" for record in served.tokens.records(served.store.identity("bob"), None))
    assert asyncio.run(_console_accepts(served, token)), "the console refused the printed token"
    refused = CliRunner().invoke(app, ["console", "--expiration", "999d"], env={"COLUMNS": "200"})
    assert refused.exit_code != 0 and "\n" == refused.output[-1] and "Traceback" not in refused.output


async def _console_accepts(context: ServerContext, token: str) -> bool:
    async with browser(context) as client:
        signed = await sign_in(client, token)
        return signed.status_code == 303 and ">bob<" in (await client.get("/ui/catalog")).text
