"""A stop or a scale-in that reaches a copy while its reports to the pool are in flight still stops it: copies
send their reports from a task of their own (`copy-reports-aside`), so the SDK's dropping of a cancel that lands
in the workflow task resolving an awaited signal (temporalio/sdk-python#620) cannot strand them. No
`Harness.settled()` here: the cancels are sent in the middle of the copies' reporting, on purpose."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType

from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import OWNER, Harness, copy_ids, eventually, node_ids, pool_definition
from workflows.payloads import CopyStatus, Phase, ScaleRequest, StopRequest
from workflows.pool_workflow import PoolWorkflow

pytestmark = pytest.mark.timeout(180)
POOLS = 3  # several at once, so that some cancel surely lands beside a report


async def test_stops_sent_while_copies_report_stop_every_copy(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(2 * POOLS)])
    async with harness.running(cluster):
        handles = [await harness.start(pool_definition(min_replicas=2, max_replicas=2)) for _ in range(POOLS)]
        for handle in handles:  # stop each the moment its copies are placed: their reports are in flight
            await harness.wait_status(handle, lambda s: any(c.status is not CopyStatus.SCHEDULING
                                                            for c in s.copies), "a placed copy")
            await handle.signal(PoolWorkflow.stop, StopRequest(by=OWNER.user))
        finals = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
        assert all(final.phase is Phase.STOPPED for final in finals)
        assert cluster.placements == {} and cluster.published == {}
        assert not any(rank.running for rank in cluster.ranks.values())


async def test_a_scale_in_sent_as_the_copy_reports_ready_drains_it(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(2)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=2))
        wf = handle.id
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 1, "one ready copy")
        await handle.execute_update(PoolWorkflow.scale, ScaleRequest(replicas=2))
        await harness.wait_status(handle, lambda s: f"{wf}.copy-1" in copy_ids(s), "copy-1 ready")
        await handle.execute_update(PoolWorkflow.scale, ScaleRequest(replicas=1))  # its copy_ready in flight
        await harness.wait_status(handle, lambda s: copy_ids(s, ready_only=False) == {f"{wf}.copy-0"},
                                  "copy-1 scaled in")
        await asyncio.wait_for(harness.latest(handle).signal(PoolWorkflow.stop, StopRequest(by=OWNER.user)), 10)
        final = await asyncio.wait_for(handle.result(), 60)
        assert final.phase is Phase.STOPPED and cluster.placements == {}


async def test_a_stop_that_lands_while_the_copy_publishes_leaves_no_record(harness: Harness) -> None:
    """The stop does not wait for the publish it cancels (it would swallow the stop if the publish then
    succeeded), so the publish lands after the stop's unpublish — and must find the placement gone."""
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)], publish_gate=asyncio.Event())
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=1))
        await eventually(lambda: cluster.called("publish_replica"), "the copy's publish under way")
        await handle.signal(PoolWorkflow.stop, StopRequest(by=OWNER.user))
        final = await asyncio.wait_for(handle.result(), 60)
        assert final.phase is Phase.STOPPED and cluster.placements == {}
        assert cluster.publish_gate is not None
        cluster.publish_gate.set()  # the control plane answers the publish only now
        await eventually(lambda: cluster.called("publish_landed"), "the late publish to land")
        assert cluster.published == {}


async def test_a_stop_that_lands_while_the_copy_reserves_holds_no_gpu(harness: Harness) -> None:
    """A copy stopped while its reserve_placement runs lets that attempt end before it releases: a release that
    outran it would leave the late reservation holding GPUs with no copy to free them (the parallel suite saw a
    pool that gave up while re-placing a copy keep a GPU that way)."""
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)], reserve_gate=asyncio.Event())
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=1))
        await eventually(lambda: cluster.called("reserve_placement"), "the copy's reserve under way")
        await handle.signal(PoolWorkflow.stop, StopRequest(by=OWNER.user))
        copy = harness.client.get_workflow_handle(f"{handle.id}.copy-0")

        async def cancel_reached_the_copy() -> bool:
            events = [e.event_type for e in (await copy.fetch_history()).events]
            return EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED in events

        await eventually(cancel_reached_the_copy, "the stop to reach the reserving copy")
        assert cluster.reserve_gate is not None
        cluster.reserve_gate.set()  # the control plane answers the reserve only now, after the stop
        final = await asyncio.wait_for(handle.result(), 60)
        assert final.phase is Phase.STOPPED
        assert cluster.placements == {}, "a reservation made after the copy's release still holds its GPU"
