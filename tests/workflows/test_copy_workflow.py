"""CopyWorkflow under its pool, with the node activities mocked: a copy whose rank ends stops as a unit (its event
keeps the rank, node and exit status); a rank lost with its silent agent is fenced and the copy placed again without
spending ReplaceFailedCopies; an agent that answers again adopts its rank and the copy serves on; a copy with no room
waits and says why."""

from __future__ import annotations

import pytest

from berth.contracts import FenceRequest
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import Harness, copy_ids, event_kinds, node_ids, pool_definition
from workflows.payloads import Phase, RankEnd

pytestmark = pytest.mark.timeout(120)


async def test_a_copy_stops_as_a_unit_when_one_of_its_ranks_ends(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(4)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, replace_failed_copies=1, nodes=2))
        wf = handle.id
        first, second = f"{wf}.copy-0", f"{wf}.copy-1"
        await harness.wait_status(handle, lambda s: copy_ids(s) == {first}, "copy-0 ready")
        leader, worker = cluster.placements[first].ranks
        cluster.crash(first, rank=1, exit_code=3)
        status = await harness.wait_status(handle, lambda s: copy_ids(s) == {second}, "copy-1 ready in its place")
        # Rank 0 was healthy: it was stopped with its copy, because a copy serves only whole.
        rank0, rank1 = cluster.copy_ranks(first)
        assert rank0.cancelled and not rank0.running and not rank1.cancelled
        failed = next(e for e in status.events if e.kind == "copy_failed")
        assert failed.message == f"copy stopped as a unit: rank 1 on node {worker.node_id} exited with status 3"
        # Kept whole on the event too (`berth explain failure` reads it), not only in the message.
        assert failed.ended == RankEnd(rank=1, node_id=worker.node_id, exit_code=3, reason="exited")
        assert event_kinds(status).count("copy_replaced") == 1
        assert first not in cluster.placements and cluster.called("fence_placement") == []
        assert (leader.rank, worker.rank) == (0, 1)
        # Every rank of a multi-node copy binds its node's cluster address, never 0.0.0.0 (issue 29).
        specs = [spec for spec in cluster.called("run_rank") if spec.copy_id == first]
        assert sorted(spec.host for spec in specs) == sorted([leader.address, worker.address]) and len(specs) == 2
        await harness.stop(handle)


async def test_a_rank_lost_with_its_agent_is_placed_again_without_spending_the_budget(harness: Harness) -> None:
    leader_node, lost_node, spare_node = node_ids(3)
    # The lost node's agent runs one activity at a time: silenced while it holds the rank, it takes up no
    # adopt_rank, as an agent that is gone (the adopt window then runs out).
    cluster = FakeCluster(nodes=[FakeNode(leader_node), FakeNode(lost_node, slots=1), FakeNode(spare_node)])
    async with harness.running(cluster):
        # ReplaceFailedCopies=0 at the minimum: a *failed* copy would fail the workflow.
        handle = await harness.start(pool_definition(min_replicas=1, replace_failed_copies=0, nodes=2))
        wf = handle.id
        first, second = f"{wf}.copy-0", f"{wf}.copy-1"
        await harness.wait_status(handle, lambda s: copy_ids(s) == {first}, "copy-0 ready")
        assert [r.node_id for r in cluster.placements[first].ranks] == [leader_node, lost_node]
        cluster.silence(lost_node)
        status = await harness.wait_status(handle, lambda s: copy_ids(s) == {second} and s.phase is Phase.READY,
                                           "copy-1 ready in place of the lost copy-0")
        kinds = event_kinds(status)
        assert "copy_failed" not in kinds and "copy_replaced" not in kinds
        unresponsive = next(e for e in status.events if e.kind == "rank_unresponsive")
        assert unresponsive.message.startswith(f"node agent of {lost_node} stopped answering for rank 1 of {first}")
        interrupted = next(e for e in status.events if e.kind == "copy_interrupted")
        assert f"rank 1 on node {lost_node} was lost (its node agent stopped answering)" in interrupted.message
        assert interrupted.message.endswith("placing it again")
        assert interrupted.ended is not None and (interrupted.ended.node_id, interrupted.ended.reason) == (
            lost_node, "lost")
        # What the lost rank holds stays fenced before the copy's placement is released; the new copy avoids it.
        names = [name for name, _ in cluster.calls]
        fence = names.index("fence_placement")
        assert cluster.calls[fence][1] == FenceRequest(copy_id=first, nodes=(lost_node,))
        assert cluster.calls[fence + 1] == ("release_placement", first)
        assert [r.node_id for r in cluster.placements[second].ranks] == [leader_node, spare_node]
        assert cluster.called("adopt_rank") == []
        await harness.stop(handle)


async def test_an_agent_that_answers_again_adopts_its_rank_and_the_copy_serves_on(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1))
        first = f"{handle.id}.copy-0"
        await harness.wait_status(handle, lambda s: copy_ids(s) == {first}, "copy-0 ready")
        node = cluster.nodes[0]
        node.silent = True  # a pause longer than the heartbeat timeout, then the agent answers again
        await harness.wait_status(handle, lambda s: "rank_unresponsive" in event_kinds(s), "the rank seen silent")
        node.silent = False
        adopted = await harness.wait_status(handle, lambda s: len(cluster.called("adopt_rank")) == 1,
                                            "the rank adopted")
        assert copy_ids(adopted) == {first} and adopted.phase is Phase.READY
        assert cluster.copy_ranks(first)[0].running
        final = await harness.stop(handle)
        assert "copy_interrupted" not in event_kinds(final) and cluster.called("fence_placement") == []


async def test_a_copy_with_no_room_waits_and_says_why(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=2))
        status = await harness.wait_status(
            handle, lambda s: "scheduling_blocked" in event_kinds(s) and len(copy_ids(s)) == 1,
            "one copy ready, the other blocked")
        assert status.phase is Phase.READY  # one copy serves while the other waits for room
        # Whichever of the two reserved second waits.
        (blocked,) = [c for c in status.copies if c.status.value == "scheduling"]
        assert blocked.detail == "pending: 1 nodes with a free GPU needed, 0 have one"
        event = next(e for e in status.events if e.kind == "scheduling_blocked")
        assert (event.copy_id, event.message) == (blocked.copy_id, "1 nodes with a free GPU needed, 0 have one")
        await harness.stop(handle)
