"""`berth node mig create|list|delete` against a real API on loopback, as an administrator: a slice made (by short
profile name, with a UUID, and pending without one), listed (and `-o json` as the API sent it) and removed; a refusal
is the API's one line, a bad option one line before anything is sent."""

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
UUID = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the MIG routes never reach Temporal
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "memory_gb": 85.5} for i in range(2)]
    context.store.heartbeat_node("gpu-1", {"address": "127.0.0.1", "engine": "vllm", "gpus": gpus}, 30000)
    with serve_api(context, context.signing.api_token(ADMIN), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_an_administrator_makes_lists_and_removes_slices(served: ServerContext) -> None:
    code, out = _run("node", "mig", "create", "gpu-1", "--gpu", "0", "--profile", "3g", "--uuid", UUID)
    assert code == 0 and f"Made MIG slice 512 (3g.40gb) of GPU 0 on node gpu-1; named {UUID}." in out, out
    code, out = _run("node", "mig", "create", "gpu-1", "--gpu", "1", "--profile", "7G.80GB")
    assert code == 0 and "Made MIG slice 513 (7g.80gb) of GPU 1 on node gpu-1; pending: no instance named yet" in out
    code, out = _run("node", "mig", "list", "gpu-1")
    rows = [[cell.strip() for cell in line.strip("│ ").split("│")] for line in out.splitlines() if " 51" in line]
    assert code == 0 and rows == [["512", "0", "3g.40gb", "40 GB", UUID], ["513", "1", "7g.80gb", "80 GB", "pending"]]
    code, out = _run("node", "mig", "list", "gpu-1", "-o", "json")
    assert code == 0 and [s["uuid"] for s in json.loads(out)] == [UUID, None]
    code, out = _run("node", "mig", "create", "gpu-1", "--gpu", "1", "--profile", "1g")
    assert code == 1 and "GPU 1 on node gpu-1 cannot take it: 1g.10gb needs 1 compute slice(s)" in out, out
    code, out = _run("node", "mig", "delete", "gpu-1", "513")
    assert code == 0 and "Removed MIG slice 513 from node gpu-1." in out
    code, out = _run("node", "mig", "delete", "gpu-1", "513")
    assert code == 1 and "No MIG slice 513 on node gpu-1." in out


def test_a_bad_uuid_is_one_line_and_sends_nothing(served: ServerContext) -> None:
    code, out = _run("node", "mig", "create", "gpu-1", "--gpu", "0", "--profile", "1g", "--uuid", "GPU-0,1")
    assert code == 2 and "uuid: String should match pattern" in out, out
    code, out = _run("node", "mig", "list", "gpu-1")
    assert code == 0 and "51" not in out
