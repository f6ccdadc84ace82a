"""`berth capacity` against a real API on loopback: the summary, the node, GPU-model and entry tables, and `-o json`
as the API sent it; and how an entry's fit reads (`fit_text`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.contracts import EntryFit, ReserveRequest
from berth.security import Identity
from cli.app import app
from cli.capacity import fit_text
from node.inventory import simulated_gpus
from server.app import build_context
from server.context import ServerContext
from tests.cli.loopback_api import serve_api

pytestmark = pytest.mark.timeout(60)
USER = Identity(user="alice", groups=("team",), org="acme")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    """node-1: 2×80 GB, one GPU reserved for a copy (not serving yet); node-2: 1×24 GB, draining."""
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the capacity route never reaches Temporal
    for node_id, gpus in (("node-1", "2x80GB"), ("node-2", "1x24GB")):
        context.store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "simulator",
                                               "gpus": simulated_gpus(gpus, node_id)}, 30000)
    reserved = context.store.placements.reserve(ReserveRequest(workflow_id="wf-1", copy_id="wf-1.copy-0", nodes=1,
                                                               gpus_per_node=1, gpu_memory_gb=60.0))
    assert reserved.placement is not None
    context.store.set_draining("node-2", True)
    with serve_api(context, context.signing.api_token(USER), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_capacity_prints_tables_and_json(served: ServerContext) -> None:
    code, out = _run("capacity")
    assert code == 0, out
    assert "GPUs: 2 of 3 free (104 of 184 GB), 1 of them available to new copies now; 0 serving, 1 reserved. " \
           "Nodes: 1 ready, 1 draining, 0 offline." in out
    node_1 = next(line for line in out.splitlines() if "node-1" in line)
    assert "1/2" in node_1 and "80/160" in node_1 and "(another user)" in node_1  # alice's view of a copy not hers
    assert "Simulated GPU 80GB" in out and "Simulated GPU 24GB" in out
    assert "fits (node-1)" in out and "HfTokenSecret" in out
    assert "does not fit now: needs 2 GPUs of ≥ 49.4 GB on one node, the most available on one node is 1" in out
    code, out = _run("capacity", "-o", "json")
    answer = json.loads(out)
    assert code == 0 and set(answer) == {"total", "node_states", "nodes", "gpu_models", "entries"}
    assert answer["total"] == {"total": 3, "serving": 0, "reserved": 1, "free": 2, "available": 1,
                               "memory_gb": 184.0, "free_memory_gb": 104.0, "available_memory_gb": 80.0}


def _fit(**fields: object) -> EntryFit:
    defaults: dict[str, object] = {"entry": "E", "nodes": 1, "gpus_per_node": 1, "min_gpu_memory_gb": 0,
                                   "needs_values": [], "fits": False, "placement": [], "most_available_on_a_node": 0,
                                   "placeable": True, "reason": "waiting"}
    return EntryFit.model_validate({**defaults, **fields})


def test_a_fit_reads_as_where_what_it_needs_or_why_never() -> None:
    assert fit_text(_fit(fits=True, placement=["node-1", "node-2"], reason=None)) == "fits (node-1, node-2)"
    assert fit_text(_fit(nodes=2, gpus_per_node=4, min_gpu_memory_gb=68.3, most_available_on_a_node=3)) == (
        "does not fit now: needs 4 GPUs of ≥ 68.3 GB on each of 2 nodes, the most available on one node is 3")
    assert fit_text(_fit()) == "does not fit now: needs 1 GPU on one node, the most available on one node is 0"
    assert fit_text(_fit(gpus_per_node=0, reason="waiting for 1 node(s)")) == "does not fit now: waiting for 1 node(s)"
    assert fit_text(_fit(placeable=False, reason="too big")) == "never fits on this cluster: too big"
