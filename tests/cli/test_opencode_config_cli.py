"""`berth endpoint opencode-config` for a gateway endpoint against a real API on loopback (issue 31): the
gateway's provider block with every model it serves, each with its own pool's limits, and the largest context
as the default, where it used to refuse a gateway. `--no-verify`: the endpoint proxy is not running here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.security import Identity
from cli.app import app
from server.app import build_context
from tests.cli.loopback_api import serve_api
from tests.server.catalog_rows import start_rows

ALICE = Identity(user="alice", groups=("default",), org="default")
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN = "Qwen/Qwen3-Coder-30B-A3B-Instruct"


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # client-config never reaches Temporal
    alice = context.store.ensure_user("alice", org="default", groups=["default"])
    start_rows(context, "SmolLM2 135M Instruct", {"Proxy": False}, ALICE)  # 8192 tokens
    start_rows(context, "Qwen3-Coder 30B", {"Proxy": False, "MaxContextSize": 32768}, ALICE)
    gateway = start_rows(context, "LiteLLM Model Gateway", {}, ALICE)
    with serve_api(context, context.signing.api_token(alice), tmp_path, monkeypatch):
        yield gateway


def test_a_gateway_gets_every_model_with_its_own_limits(gateway: str) -> None:
    result = CliRunner().invoke(app, ["endpoint", "opencode-config", gateway, "--no-verify"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)
    provider = config["provider"]["berth"]
    assert provider["options"]["baseURL"].endswith(f"/endpoints/{gateway}/v1")
    assert {model: entry["limit"] for model, entry in provider["models"].items()} == {
        SMOL: {"context": 8192, "output": 2048}, QWEN: {"context": 32768, "output": 8192}}
    assert config["model"] == f"berth/{QWEN}"
    assert f"generate-token {gateway}" in result.stderr


def test_an_output_limit_too_large_for_one_model_is_refused_naming_it(gateway: str) -> None:
    result = CliRunner().invoke(app, ["endpoint", "opencode-config", gateway, "--no-verify", "--output-limit",
                                      "8192"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert f"The output limit (8192) must be below the context of {SMOL} (8192)." in result.stderr
