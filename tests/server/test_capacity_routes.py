"""`GET /v1/capacity` through the real app and the typed client, on a store with a serving copy, a reserved one on a
node since drained, and an offline node: a user reads the administrator's figures, with other users' copies unnamed;
the entries fit as the scheduler would place them; no token is a one-line refusal."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import Capacity, ReserveRequest
from berth.errors import AuthenticationError
from berth.security import Identity
from node.inventory import simulated_gpus
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import WorkflowRow

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")


def _heartbeat(context: ServerContext, node_id: str, gpus: str, leaving: bool = False) -> None:
    inventory = {"address": "127.0.0.1", "engine": "simulator", "gpus": simulated_gpus(gpus, node_id),
                 "leaving": leaving}
    context.store.heartbeat_node(node_id, inventory, 30000)


def _reserve(context: ServerContext, workflow_id: str, owner: str, gpus: int) -> str:
    with context.store.session() as session:
        session.add(WorkflowRow(id=workflow_id, entry="vLLM", owner=owner, org="acme", created_at=time.time(),
                                definition="", endpoint_id=f"ep-{workflow_id}"))
    copy_id = f"{workflow_id}.copy-0"
    result = context.store.placements.reserve(ReserveRequest(workflow_id=workflow_id, copy_id=copy_id, nodes=1,
                                                              gpus_per_node=gpus, gpu_memory_gb=60.0))
    assert result.placement is not None, result.blocked_reason
    return result.placement.ranks[0].node_id


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """node-1: 2×80 GB, one GPU serving alice's copy; node-2: 2×80 GB reserved for the administrator's copy, then
    drained; node-3: 1×24 GB free; node-4: 1×80 GB, offline."""
    context = build_context(tmp_path, "127.0.0.1:1")  # the capacity route never reaches Temporal
    context.store.ensure_user("alice", org="acme", groups=["team"])
    for node_id, gpus in (("node-1", "2x80GB"), ("node-2", "2x80GB"), ("node-3", "1x24GB")):
        _heartbeat(context, node_id, gpus)
    assert _reserve(context, "wf-alice", "alice", 1) == "node-1"  # pack: the first of two equal nodes
    assert _reserve(context, "wf-admin", "admin", 2) == "node-2"
    assert context.store.placements.publish("wf-alice", "ep-wf-alice", "wf-alice.copy-0", "http://n1:1", ready=True)
    context.store.set_draining("node-2", True)
    _heartbeat(context, "node-4", "1x80GB", leaving=True)
    return context


def _client(context: ServerContext, token: str) -> ApiClient:
    return ApiClient("http://api", token, transport=httpx.ASGITransport(app=create_app(context)))


async def _capacity(context: ServerContext, who: Identity) -> Capacity:
    async with _client(context, context.signing.api_token(who)) as api:
        return await api.capacity()


async def test_the_figures_count_serving_reserved_free_and_available_gpus(context: ServerContext) -> None:
    answer = await _capacity(context, ADMIN)
    total = answer.total
    assert (total.total, total.serving, total.reserved, total.free, total.available) == (6, 1, 2, 3, 2)
    assert (total.memory_gb, total.free_memory_gb, total.available_memory_gb) == (424.0, 184.0, 104.0)
    assert answer.node_states.model_dump() == {"ready": 2, "draining": 1, "offline": 1, "tainted": 0}
    nodes = {n.id: n for n in answer.nodes}
    assert [(n.state, n.gpus.available, n.copies) for n in nodes.values()] == [
        ("ready", 1, ["wf-alice.copy-0"]), ("draining", 0, ["wf-admin.copy-0"]), ("ready", 1, []), ("offline", 0, [])]
    assert [(m.name, m.nodes, m.gpus.total, m.gpus.available) for m in answer.gpu_models] == [
        ("Simulated GPU 80GB", 3, 5, 1), ("Simulated GPU 24GB", 1, 1, 1)]


async def test_the_entries_fit_as_the_scheduler_would_place_them_now(context: ServerContext) -> None:
    fits = {fit.entry: fit for fit in (await _capacity(context, ADMIN)).entries}
    assert "OpenCode" not in fits and "LiteLLM Model Gateway" not in fits  # they place no model copy
    assert (fits["GPT-OSS 20B"].fits, fits["GPT-OSS 20B"].placement) == (True, ["node-1"])
    assert (fits["GPT-OSS 120B"].fits, fits["GPT-OSS 120B"].placement) == (True, ["node-1"])
    coder = fits["Qwen3-Coder 30B"]  # 2 GPUs: node-1 has one available, node-2 is drained
    assert (coder.fits, coder.placeable, coder.most_available_on_a_node) == (False, True, 1)
    scout = fits["Llama 4 Scout"]  # 4 GPUs of ≥ 68 GB: no node has that many
    assert (scout.fits, scout.placeable, scout.needs_values) == (False, False, ["HfTokenSecret"])


async def test_a_user_reads_the_same_figures_with_other_users_copies_unnamed(context: ServerContext) -> None:
    admin, alice = await _capacity(context, ADMIN), await _capacity(context, ALICE)
    assert alice.total == admin.total and alice.gpu_models == admin.gpu_models and alice.entries == admin.entries
    assert [n.gpus for n in alice.nodes] == [n.gpus for n in admin.nodes]
    assert {n.id: n.copies for n in alice.nodes if n.copies} == {"node-1": ["wf-alice.copy-0"],
                                                                 "node-2": ["(another user)"]}


async def test_no_token_is_refused_in_one_line(context: ServerContext) -> None:
    async with _client(context, "") as api:
        with pytest.raises(AuthenticationError, match="No Berth API token"):
            await api.capacity()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api") as raw:
        answer = await raw.get("/v1/capacity")
    assert answer.status_code == 401 and set(answer.json()) == {"detail", "code"} and "\n" not in answer.text
