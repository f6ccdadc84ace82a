"""`berth catalog list/describe/start` end to end: the real CLI process against the API on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.catalog.conftest import CatalogApi

REPO = Path(__file__).resolve().parents[2]


def berth(api: CatalogApi, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        BERTH_API_URL=api.base_url,
        BERTH_TOKEN=api.token,
        BERTH_CONFIG=str(tmp_path / "client.json"),
        COLUMNS="200",
        PYTHONPATH=str(REPO),
    )
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=60, env=env, cwd=REPO
    )


def test_list_describe_and_start(catalog_api: CatalogApi, tmp_path: Path) -> None:
    listed = berth(
        catalog_api,
        tmp_path,
        "workflow",
        "catalog",
        "list",
        "--category",
        "ML_AND_AI",
        "--tag",
        "LLM",
        "-o",
        "json",
    )
    assert listed.returncode == 0, listed.stderr
    assert {"GPT-OSS 20B", "Nemotron 3 Super", "OpenCode"} <= {e["name"] for e in json.loads(listed.stdout)}

    described = berth(catalog_api, tmp_path, "catalog", "describe", "Qwen3-Coder 30B")
    assert described.returncode == 0, described.stderr
    out = described.stdout
    # RoutingPolicy: per-endpoint routing (issue 7).
    assert "MaxContextSize" in out and "256..1048576" in out and "RoutingPolicy" in out
    assert "auto (2)" in out and "262,144 (default)" in out and "88.9" in out
    assert "At its default context it needs 88.9 GB: GpusPerNode=2 by default" in out

    catalog_api.add_node("node-a", [80, 80, 80, 80])
    catalog_api.add_node("node-b", [80, 80, 80, 80])
    started = berth(
        catalog_api,
        tmp_path,
        "workflow",
        "catalog",
        "start",
        "Nemotron 3 Super",
        "--values",
        "Nodes=2,GpusPerNode=4,ExtraEnv='NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5',"
        "ExtraArgs='--tool-call-parser openai --enable-auto-tool-choice'",
    )
    # Every check passed; only Temporal (unreachable in this test) stands between it and a workflow.
    assert started.returncode != 0 and "Temporal" in started.stderr, started.stderr

    values = tmp_path / "values.yaml"
    values.write_text("GpusPerNode: 1\n")
    refused = berth(
        catalog_api, tmp_path, "workflow", "catalog", "start", "Qwen3-Coder 30B", "--values-file", str(values)
    )
    assert refused.returncode != 0
    assert "Rejected:" in refused.stderr and "MaxContextSize=90112 or less" in refused.stderr
    assert "Traceback" not in refused.stderr
