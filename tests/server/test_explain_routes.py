"""`GET /v1/explain/placement/{id}` through the real app and the typed client: a workflow's placed copy and its next
one, one copy by its ID, and the refusals (outside the workflow's scope, no token) in one line."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import PlacementExplanation, ReserveRequest
from berth.errors import AuthenticationError, NotFoundError
from berth.security import Identity
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from node.inventory import simulated_gpus
from server.app import build_context, create_app
from server.context import ServerContext
from server.submission import new_rows

pytestmark = pytest.mark.timeout(60)
ALICE = Identity(user="alice", groups=("team",), org="acme")
BOB = Identity(user="bob", groups=("other",), org="elsewhere")


def _heartbeat(context: ServerContext, node_id: str, gpus: str) -> None:
    inventory = {"address": "127.0.0.1", "engine": "simulator", "gpus": simulated_gpus(gpus, node_id)}
    context.store.heartbeat_node(node_id, inventory, 30000)


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """Alice's Qwen3-Coder 30B (2 GPUs of ≥ 49 GB a copy) holds node-1's two 80 GB GPUs; node-2 (2×80 GB) is
    drained; node-3 has one 24 GB GPU."""
    context = build_context(tmp_path, "127.0.0.1:1")  # the explain route never reaches Temporal
    for who in (ALICE, BOB):
        context.store.ensure_user(who.user, org=who.org, groups=list(who.groups))
    for node_id, gpus in (("node-1", "2x80GB"), ("node-2", "2x80GB"), ("node-3", "1x24GB")):
        _heartbeat(context, node_id, gpus)
    entry = load_catalog()["Qwen3-Coder 30B"]
    definition = render(entry, resolve_values(entry, {}))
    row, endpoint = new_rows(entry, definition, ALICE, "wf-coder")
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    assert definition.replica is not None
    result = context.store.placements.reserve(ReserveRequest(
        workflow_id="wf-coder", copy_id="wf-coder.copy-0", nodes=1, gpus_per_node=2,
        gpu_memory_gb=definition.replica.gpu_memory_gb))
    assert result.placement is not None and result.placement.ranks[0].node_id == "node-1"
    context.store.set_draining("node-2", True)
    return context


def _client(context: ServerContext, who: Identity | None) -> ApiClient:
    token = context.signing.api_token(who) if who is not None else ""
    return ApiClient("http://api", token, transport=httpx.ASGITransport(app=create_app(context)))


async def _explain(context: ServerContext, target_id: str, who: Identity | None = ALICE) -> PlacementExplanation:
    async with _client(context, who) as api:
        return await api.explain_placement(target_id)


async def test_a_workflow_shows_its_placed_copy_and_what_its_next_copy_meets(context: ServerContext) -> None:
    answer = await _explain(context, "wf-coder")
    assert (answer.workflow_id, answer.policy, answer.nodes_per_copy, answer.gpus_per_node) == (
        "wf-coder", "pack", 1, 2)
    placed, following = answer.copies
    assert (placed.copy_id, placed.placed, placed.fits_now) == ("wf-coder.copy-0", True, True)
    assert [(n.node, n.outcome, n.gpus) for n in placed.nodes] == [
        ("node-1", "chosen", [0, 1]), ("node-2", "draining", []), ("node-3", "gpus_too_small", [])]
    assert (following.copy_id, following.placed, following.fits_now) == (None, False, False)
    assert following.blocked_reason is not None and following.blocked_reason.startswith("waiting for 1 node(s)")
    assert {n.node: n.outcome for n in following.nodes} == {"node-1": "busy", "node-2": "draining",
                                                           "node-3": "gpus_too_small"}
    assert following.advice[-2:] == [
        "node-1 would take it once 2 more of its GPUs free (held by wf-coder.copy-0)",
        "node-2 would take it once an administrator undrains it (`berth node undrain node-2`)"]


async def test_one_copy_by_its_id_placed_or_not(context: ServerContext) -> None:
    placed = await _explain(context, "wf-coder.copy-0")
    assert [(c.copy_id, c.placed) for c in placed.copies] == [("wf-coder.copy-0", True)]
    pending = await _explain(context, "wf-coder.copy-3")  # blocked: it holds no reservation
    assert [(c.copy_id, c.placed, c.fits_now) for c in pending.copies] == [("wf-coder.copy-3", False, False)]


async def test_outside_the_workflows_scope_it_does_not_exist_and_no_token_is_refused(context: ServerContext) -> None:
    for target in ("wf-coder", "wf-coder.copy-0", "no-such", "no-such.copy-0"):
        with pytest.raises(NotFoundError, match="No workflow with ID"):
            await _explain(context, target, BOB)
    with pytest.raises(AuthenticationError, match="No Berth API token"):
        await _explain(context, "wf-coder", None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api") as raw:
        answer = await raw.get("/v1/explain/placement/wf-coder",
                               headers={"Authorization": f"Bearer {context.signing.api_token(BOB)}"})
    assert answer.status_code == 404 and set(answer.json()) == {"detail", "code"} and "\n" not in answer.text
