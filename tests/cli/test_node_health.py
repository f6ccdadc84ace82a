"""`berth node list` against a real API on loopback: each GPU's last known temperature, power and ECC count, and the
GPUs placement skips under the cluster's default `max_gpu_temp_c` (90) and `reject_ecc` (on), with why; `-o json`
as the API sent it."""

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


def _gpu(index: int, **readings: object) -> dict[str, object]:
    return {"index": index, "name": "NVIDIA H100", "memory_gb": 80.0, "uuid": f"GPU-{index}", **readings}


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    """node-1: GPU 0 at 95 °C, GPU 1 with 2 ECC errors, GPU 2 healthy, GPU 3 never read."""
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # node list never reaches Temporal
    gpus = [_gpu(0, temperature_c=95, power_w=650.5, ecc_uncorrected=0), _gpu(1, temperature_c=50, ecc_uncorrected=2),
            _gpu(2, temperature_c=40, power_w=90.0, ecc_uncorrected=0), _gpu(3)]
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "vllm", "gpus": gpus}, 30000)
    # A heartbeat whose reads failed: the last known readings stay, so do the verdicts.
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "vllm",
                                            "gpus": [_gpu(i) for i in range(4)]}, 30000)
    with serve_api(context, context.signing.api_token(Identity(user="alice", groups=("team",), org="acme")),
                   tmp_path, monkeypatch):
        yield context


def test_node_list_shows_readings_and_the_gpus_placement_skips(served: ServerContext) -> None:
    result = CliRunner().invoke(app, ["node", "list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.output.splitlines()
             if "GPU-" in line]
    assert [row[1:2] + row[6:] for row in cells] == [
        ["0", "95 °C", "650.5 W", "0", "skipped: 95 °C, over the cluster's max_gpu_temp_c (90 °C)"],
        ["1", "50 °C", "-", "2", "skipped: 2 uncorrected ECC error(s) since its last reset (reject_ecc)"],
        ["2", "40 °C", "90 W", "0", "ok"],
        ["3", "-", "-", "-", "ok"]]
    listed = json.loads(CliRunner().invoke(app, ["node", "list", "-o", "json"]).output)
    gpus = listed[0]["gpus"]
    assert [g.get("unhealthy") for g in gpus] == [
        "95 °C, over the cluster's max_gpu_temp_c (90 °C)",
        "2 uncorrected ECC error(s) since its last reset (reject_ecc)", None, None]
    assert (gpus[0]["temperature_c"], gpus[0]["power_w"], gpus[1]["ecc_uncorrected"]) == (95, 650.5, 2)
