"""Quotas at placement, on a local Temporal server: the pool's copies are placed by the control plane's real
placement store (server/store/placement.py) under a user's `max_copies`, so the copy that would exceed it — a
scale-out's, a rolling update's surge copy — waits with the policy's line as its scheduling_blocked reason, and
the copies within it serve."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from berth.contracts import ReserveRequest, ReserveResult, RolloutStrategy
from berth.contracts.policies import PolicyRules
from node.inventory import simulated_gpus
from server.app import build_context
from server.context import ServerContext
from server.store.policies import Policies
from server.store.tables import EndpointRow, WorkflowRow
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import OWNER, Harness, node_ids, pool_definition
from tests.workflows.test_rollouts import bigger_context, roll, serving_copies
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import PoolStatus, ScaleRequest

pytestmark = pytest.mark.timeout(120)
REFUSAL = "Refused by policy user/alice: max_copies 2, 2 in use, this needs 1 more."


class StoreCluster(FakeCluster):
    """The fake cluster with its placements made by the real store (the control plane's reservation route)."""

    context: ServerContext

    @implements(stubs.reserve_placement)
    async def reserve_placement(self, request: ReserveRequest) -> ReserveResult:
        self._record("reserve_placement", request)
        result = await asyncio.to_thread(self.context.store.placements.reserve, request)
        if result.placement is not None:
            self.placements[request.copy_id] = result.placement
        return result

    @implements(stubs.release_placement)
    async def release_placement(self, copy_id: str) -> None:
        await asyncio.to_thread(self.context.store.placements.release, copy_id)
        await super().release_placement(copy_id)


def store_cluster(tmp_path: Path, nodes: int) -> StoreCluster:
    context = build_context(tmp_path / "api", "127.0.0.1:1")
    context.store.ensure_user(OWNER.user, org="acme", groups=list(OWNER.groups))
    names = node_ids(nodes)
    for node_id in names:
        context.store.heartbeat_node(node_id, {"address": "127.0.0.1", "engine": "simulator",
                                               "gpus": simulated_gpus("1x80GB", node_id)}, 30000)
    Policies(context.store).put("user", OWNER.user, PolicyRules(max_copies=2), "admin")
    cluster = StoreCluster(nodes=[FakeNode(node_id) for node_id in names])
    cluster.context = context
    return cluster


def own(context: ServerContext, workflow_id: str, endpoint_id: str) -> None:
    """The workflow's rows, as a start writes them: whose it is is what the quota counts."""
    with context.store.session() as s:
        s.add(WorkflowRow(id=workflow_id, entry="tiny-model", owner=OWNER.user, org="acme", created_at=time.time(),
                          definition="", endpoint_id=endpoint_id))
        s.add(EndpointRow(id=endpoint_id, workflow_id=workflow_id, service="vllm", scope="user", owner=OWNER.user,
                          org="acme", groups=list(OWNER.groups), created_at=time.time()))


def blocked_by_quota(status: PoolStatus) -> bool:
    return any(e.kind == "scheduling_blocked" and e.message == REFUSAL for e in status.events)


async def test_a_scale_out_past_the_quota_waits_with_the_policy_named(harness: Harness, tmp_path: Path) -> None:
    cluster = store_cluster(tmp_path, 3)
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=2, max_replicas=3))
        own(cluster.context, handle.id, harness.inputs[handle.id].endpoint_id)
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two ready copies")
        await harness.latest(handle).execute_update("scale", ScaleRequest(replicas=3, reason="test"))
        status = await harness.wait_status(handle, blocked_by_quota, "the third copy blocked by the quota")
        assert len(serving_copies(status)) == 2  # the two within the quota serve on
        assert len(cluster.context.store.placements.reservations(handle.id)) == 2  # a free node was not taken


async def test_a_rolling_updates_surge_copy_past_the_quota_waits_with_the_policy_named(
        harness: Harness, tmp_path: Path) -> None:
    cluster = store_cluster(tmp_path, 3)
    definition = pool_definition(min_replicas=2, max_replicas=3)
    async with harness.running(cluster):
        handle = await harness.start(definition)
        own(cluster.context, handle.id, harness.inputs[handle.id].endpoint_id)
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two ready copies")
        await roll(harness, handle, bigger_context(definition), RolloutStrategy(max_surge=1, min_ready_s=0.5))
        status = await harness.wait_status(handle, blocked_by_quota, "the surge copy blocked by the quota")
        assert serving_copies(status) == [(c, 1) for c, _ in serving_copies(status)]  # revision 1 serves on
        assert len(serving_copies(status)) == 2
