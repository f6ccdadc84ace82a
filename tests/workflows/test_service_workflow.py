"""PoolWorkflow's pool on a real Temporal server with the placement and node activities mocked: it places
MinReplicas copies and reports ready, re-places a failed copy, fails on the same failure three times in a
row, scales, and on stop stops every copy and releases every placement."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import Harness, copy_ids, event_kinds, eventually, node_ids, pool_definition
from workflows.payloads import Phase, ScaleRequest
from workflows.pool_workflow import PoolWorkflow

pytestmark = pytest.mark.timeout(120)


def cluster_of(count: int) -> FakeCluster:
    return FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(count)])


async def test_a_pool_places_min_replicas_copies_and_reports_ready(harness: Harness) -> None:
    cluster = cluster_of(3)
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=2, max_replicas=3))
        # The copy reports its state, then the event: both arrive, in that order.
        status = await harness.wait_status(
            handle, lambda s: len(copy_ids(s)) == 2 and event_kinds(s).count("copy_ready") == 2, "two ready copies")
        assert status.phase is Phase.READY
        wf = handle.id
        assert copy_ids(status) == {f"{wf}.copy-0", f"{wf}.copy-1"}
        assert status.desired_copies == 2
        # Each copy on a node of its own, published at its leader's address; the third node stays free.
        assert len({p.leader.node_id for p in cluster.placements.values()}) == 2
        for copy in status.copies:
            leader = cluster.placements[copy.copy_id].leader
            assert copy.url == f"http://127.0.0.1:{leader.port}" == cluster.published[copy.copy_id].url
            assert copy.nodes == (leader.node_id,)
        kinds = event_kinds(status)
        assert kinds[0] == "submitted"
        assert kinds.count("copy_placed") == kinds.count("copy_ready") == 2
        await harness.stop(handle)


async def test_stop_stops_every_copy_and_releases_every_placement(harness: Harness) -> None:
    cluster = cluster_of(2)
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=2, max_replicas=2))
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 2, "two ready copies")
        copies = set(cluster.placements)
        final = await harness.stop(handle)
        assert final.phase is Phase.STOPPED
        assert final.copies == ()
        assert event_kinds(final)[-1] == "stopped"
        assert all(rank.cancelled and not rank.running for rank in cluster.ranks.values())
        assert len(cluster.ranks) == 2
        assert set(cluster.called("unpublish_replica")) == copies and cluster.published == {}
        assert set(cluster.called("release_placement")) == copies and cluster.placements == {}
        endpoint_id = harness.inputs[handle.id].endpoint_id
        assert [r.endpoint_id for r in cluster.called("remove_endpoint")] == [endpoint_id]


async def test_a_failed_copy_is_placed_again_while_the_others_serve(harness: Harness) -> None:
    cluster = cluster_of(3)
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=2, max_replicas=2, replace_failed_copies=1))
        wf = handle.id
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 2, "two ready copies")
        cluster.crash(f"{wf}.copy-0", signal=9)
        status = await harness.wait_status(
            handle, lambda s: copy_ids(s) == {f"{wf}.copy-1", f"{wf}.copy-2"} and s.phase is Phase.READY,
            "copy-2 ready in place of the crashed copy-0")
        failed = [e for e in status.events if e.kind == "copy_failed"]
        assert [e.copy_id for e in failed] == [f"{wf}.copy-0"]
        assert "rank 0 on node" in failed[0].message and "killed by signal 9" in failed[0].message
        replaced = [e.message for e in status.events if e.kind == "copy_replaced"]
        assert replaced == [f"{wf}.copy-0: re-placing it now (1 of ReplaceFailedCopies=1 in a row)"]
        assert status.last_error is not None and status.last_error.startswith(f"{wf}.copy-0: ")
        # The crashed copy left routing and gave its GPU back; its sibling served on, never stopped.
        assert f"{wf}.copy-0" in cluster.called("unpublish_replica")
        assert f"{wf}.copy-0" in cluster.called("release_placement") and f"{wf}.copy-0" not in cluster.placements
        assert not any(rank.cancelled for rank in cluster.copy_ranks(f"{wf}.copy-1"))
        await harness.stop(handle)


async def test_the_same_failure_three_times_in_a_row_fails_the_workflow(harness: Harness) -> None:
    cluster = cluster_of(1)
    cluster.crash_on_start = 3  # the model itself cannot start: every copy's rank exits with status 3
    async with harness.running(cluster):
        # Budget to spare: it is the repeated failure, not a spent budget, that fails the workflow.
        handle = await harness.start(pool_definition(min_replicas=1, replace_failed_copies=10))
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "CopyFailed"
        assert cause.message.startswith("3 copies in a row failed the same way without one becoming ready; "
                                        "the model keeps failing: copy stopped as a unit: rank 0 on node ")
        assert "exited with status 3" in cause.message
        status = await harness.status(handle)
        assert status.phase is Phase.FAILED
        assert event_kinds(status).count("copy_failed") == 3
        assert event_kinds(status).count("copy_replaced") == 2
        placed = [r.copy_id for r in cluster.called("reserve_placement")]
        assert sorted(set(placed)) == [f"{handle.id}.copy-{i}" for i in range(3)]
        assert cluster.placements == {} and cluster.published == {}


async def test_a_stop_during_a_drain_stops_the_draining_copy_too(harness: Harness) -> None:
    # The drain waits for in-flight requests when the stop arrives: the copy it was draining must be stopped
    # with the rest (it used to be dropped from the pool, its ranks left running and its GPUs released).
    cluster = cluster_of(2)
    cluster.drain_gate = asyncio.Event()
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=2))
        wf = handle.id
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 1, "one ready copy")
        await handle.execute_update(PoolWorkflow.scale, ScaleRequest(replicas=2, reason="test"))
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 2, "a second ready copy")
        await harness.settled([f"{wf}.copy-1"])
        await handle.execute_update(PoolWorkflow.scale, ScaleRequest(replicas=1))
        await eventually(lambda: cluster.called("drain_replica"), "the drain to begin")
        status = await harness.stop(handle)
        assert status.phase is Phase.STOPPED
        for copy_id in (f"{wf}.copy-0", f"{wf}.copy-1"):
            assert all(rank.cancelled for rank in cluster.copy_ranks(copy_id)), copy_id
        assert cluster.placements == {}
        cluster.drain_gate.set()


async def test_scaling_in_drains_the_newest_copy_and_releases_it(harness: Harness) -> None:
    cluster = cluster_of(2)
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=2))
        wf = handle.id
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 1, "one ready copy")
        result = await handle.execute_update(PoolWorkflow.scale, ScaleRequest(replicas=2, reason="test"))
        assert (result.previous, result.desired) == (1, 2)
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 2, "a second ready copy")
        await harness.settled([f"{wf}.copy-1"])
        await handle.execute_update(PoolWorkflow.scale, ScaleRequest(replicas=1))
        status = await harness.wait_status(handle, lambda s: copy_ids(s, ready_only=False) == {f"{wf}.copy-0"},
                                           "copy-1 scaled in")
        assert [d.copy_id for d in cluster.called("drain_replica")] == [f"{wf}.copy-1"]
        assert set(cluster.placements) == {f"{wf}.copy-0"}
        assert all(rank.cancelled for rank in cluster.copy_ranks(f"{wf}.copy-1"))
        assert {"scale_up", "scale_down", "copy_draining", "copy_drained"} <= set(event_kinds(status))
        assert status.desired_copies == 1 and status.phase is Phase.READY
        await harness.stop(handle)
