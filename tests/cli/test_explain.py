"""`berth explain placement` against a real API on loopback: the placed copy's nodes, the next copy's reason and the
changes that would place it, and `-o json` as the API sent it; `berth explain scaling` answers as the old command;
`berth explain routing` and `failure` print each copy's verdict and each copy's ends and log lines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.contracts import ReserveRequest
from berth.security import Identity
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from cli.app import app
from node.inventory import simulated_gpus
from server.app import build_context
from server.context import ServerContext
from server.submission import new_rows
from tests.cli.loopback_api import serve_api

pytestmark = pytest.mark.timeout(60)
USER = Identity(user="alice", groups=("team",), org="acme")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    """Alice's GPT-OSS 20B (1 GPU) holds one of node-1's two 80 GB GPUs; node-2 (1×24 GB) is tainted."""
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the explain route never reaches Temporal
    context.store.ensure_user(USER.user, org=USER.org, groups=list(USER.groups))
    for node_id, gpus in (("node-1", "2x80GB"), ("node-2", "1x24GB")):
        context.store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "simulator", "labels": {},
                                               "taints": ["gpu=broken"] if node_id == "node-2" else [],
                                               "gpus": simulated_gpus(gpus, node_id)}, 30000)
    entry = load_catalog()["GPT-OSS 20B"]
    definition = render(entry, resolve_values(entry, {}))
    row, endpoint = new_rows(entry, definition, USER, "wf-oss")
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    reserved = context.store.placements.reserve(ReserveRequest(workflow_id="wf-oss", copy_id="wf-oss.copy-0", nodes=1,
                                                               gpus_per_node=1, gpu_memory_gb=19.0))
    assert reserved.placement is not None
    with serve_api(context, context.signing.api_token(USER), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_explain_placement_prints_each_copy_and_json(served: ServerContext) -> None:
    code, out = _run("explain", "placement", "wf-oss")
    assert code == 0, out
    assert "wf-oss: each copy takes 1 node(s) × 1 GPU(s) of ≥ 21.1 GB; placement policy pack." in out
    assert "wf-oss.copy-0: placed on node-1" in out
    assert "Next copy (a blocked copy's next try, or a scale-out): not placed; placed now it would go to node-1" in out
    node_2 = [line for line in out.splitlines() if "node-2" in line]
    assert node_2 and all("tainted" in line for line in node_2)
    code, out = _run("explain", "placement", "wf-oss", "-o", "json")
    answer = json.loads(out)
    assert code == 0 and answer["workflow_id"] == "wf-oss" and len(answer["copies"]) == 2


def test_explain_scaling_is_the_workflow_commands_answer(served: ServerContext) -> None:
    new, old = _run("explain", "scaling", "wf-oss"), _run("workflow", "explain-scaling", "wf-oss")
    assert new == old and new[0] == 1 and "the autoscaler has not sized wf-oss yet" in new[1]


def test_explain_routing_and_failure_print_each_copy(served: ServerContext) -> None:
    endpoint_id = served.store.workflow("wf-oss").endpoint_id
    assert served.store.placements.publish("wf-oss", endpoint_id, "wf-oss.copy-0", "http://127.0.0.1:9", False)
    code, out = _run("explain", "routing", endpoint_id)
    assert code == 0, out
    assert f"{endpoint_id} (wf-oss): routed by the pool's LiteLLM proxy, policy least_queue." in out
    assert [line for line in out.splitlines() if "wf-oss.copy-0" in line and "not ready" in line]
    logs = served.state.workflow_logs("wf-oss") / "wf-oss.copy-0"
    logs.mkdir(parents=True)
    (logs / "vllm-rank-0.log").write_text("loading\nCUDA out of memory\n")
    code, out = _run("explain", "failure", "wf-oss")
    assert code == 0, out
    assert "wf-oss: phase not recorded" in out and "could not be read" in out
    assert "Last lines of vllm-rank-0 (rank 0 on a node not recorded):" in out and "CUDA out of memory" in out
    code, out = _run("explain", "failure", "wf-oss.copy-0", "-o", "json")
    assert code == 0 and json.loads(out)["copies"][0]["logs"][0]["lines"] == ["loading", "CUDA out of memory"]
