"""A pool rolls to its next revision (issue 17) on a local Temporal server against the fake cluster: rolling
keeps the desired size serving throughout, blue-green switches traffic once its whole set is up, a canary
whose new revision fails pauses by itself and rolls back, promote finishes early, and the updates refuse
what does not make sense."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from berth.contracts import RevisionHealth, Rollout, RolloutAction, RolloutCommand, RolloutKind, RolloutStrategy
from catalog.definition import WorkflowDefinition
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import OWNER, Harness, event_kinds, eventually, node_ids, pool_definition
from workflows.payloads import PoolStatus, ScaleRequest, ScaleResult
from workflows.rollout_payloads import MoveRequest, RolloutRequest

pytestmark = pytest.mark.timeout(120)


def bigger_context(definition: WorkflowDefinition, max_model_len: int = 1024) -> WorkflowDefinition:
    assert definition.replica is not None
    engine = definition.replica.engine.model_copy(update={"max_model_len": max_model_len})
    return definition.model_copy(update={"replica": definition.replica.model_copy(update={"engine": engine})})


async def roll(harness: Harness, handle: WorkflowHandle[Any, Any], definition: WorkflowDefinition,
               strategy: RolloutStrategy, revision: int = 2) -> Rollout:
    """Send `roll_to` as the API does: the new revision's input signed like a start."""
    serving = harness.inputs[handle.id]
    unsigned = serving.model_copy(update={"definition": definition, "grant": ""})
    grant = harness.signing.workflow_grant(OWNER.user, handle.id, unsigned.digest())
    request = RolloutRequest(revision=revision, input=unsigned.model_copy(update={"grant": grant}),
                             strategy=strategy, by=OWNER.user)
    rollout: Rollout = await harness.latest(handle).execute_update("roll_to", request, result_type=Rollout)
    return rollout


def serving_copies(status: PoolStatus) -> list[tuple[str, int]]:
    return sorted((c.copy_id, c.revision) for c in status.copies if c.status.value == "ready")


def cluster_of(count: int) -> FakeCluster:
    return FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(count)])


async def test_a_rolling_update_keeps_the_desired_size_serving_and_ends_on_the_new_revision(
        harness: Harness) -> None:
    cluster = cluster_of(3)
    definition = pool_definition(min_replicas=2, max_replicas=3)
    async with harness.running(cluster):
        handle = await harness.start(definition)
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two ready copies")
        rollout = await roll(harness, handle, bigger_context(definition), RolloutStrategy(min_ready_s=0.5))
        assert (rollout.from_revision, rollout.to_revision, rollout.phase.value) == (1, 2, "rolling")
        fewest = 2
        while True:
            status = await harness.status(handle)
            routed = [c for c in cluster.published.values()]
            fewest = min(fewest, len(routed))
            if status.rollout is not None and status.rollout.phase.value == "complete":
                break
            await asyncio.sleep(0.05)
        final = await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two new copies")
        assert final.revision == 2 and {rev for _, rev in serving_copies(final)} == {2}
        assert fewest >= 2, "a rolling update with MaxUnavailable=0 never served on fewer copies"
        new_ranks = [r for (copy_id, _), r in cluster.ranks.items() if copy_id in {c for c, _ in serving_copies(final)}]
        assert new_ranks and all(r.spec.engine.max_model_len == 1024 for r in new_ranks)
        assert "rollout_complete" in event_kinds(final) and cluster.called("set_traffic") == []
        assert [(r.workflow_id, r.revision) for r in cluster.called("serve_revision")] == [(handle.id, 2)]
        await harness.stop(handle)


async def test_blue_green_switches_traffic_once_the_new_set_is_up_then_stops_the_old_one(harness: Harness) -> None:
    cluster = cluster_of(4)
    definition = pool_definition(min_replicas=2, max_replicas=2)
    async with harness.running(cluster):
        handle = await harness.start(definition)
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two ready copies")
        await roll(harness, handle, bigger_context(definition),
                   RolloutStrategy(kind=RolloutKind.BLUE_GREEN, min_ready_s=0, rollback_window_s=1))
        final = await harness.wait_status(
            handle, lambda s: s.rollout is not None and s.rollout.phase.value == "complete", "blue-green done")
        splits = [call.weights for call in cluster.called("set_traffic")]
        assert splits == [{1: 100, 2: 0}, {1: 0, 2: 100}, None]
        assert final.revision == 2 and {rev for _, rev in serving_copies(final)} == {2}
        assert "traffic_switched" in event_kinds(final)
        await harness.stop(handle)


async def test_a_failing_canary_pauses_by_itself_and_rolls_back_to_the_old_revision(harness: Harness) -> None:
    cluster = cluster_of(3)
    cluster.health[2] = RevisionHealth(revision=2, requests=40, errors=20, error_rate=0.5)
    definition = pool_definition(min_replicas=2, max_replicas=3)
    async with harness.running(cluster):
        handle = await harness.start(definition)
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two ready copies")
        await roll(harness, handle, bigger_context(definition),
                   RolloutStrategy(kind=RolloutKind.CANARY, min_ready_s=0, steps=(20, 100), step_hold_s=300))
        paused = await harness.wait_status(
            handle, lambda s: s.rollout is not None and s.rollout.phase.value == "paused", "the canary paused")
        assert paused.rollout is not None and "error rate 50.0 % over 40 requests" in paused.rollout.paused_reason
        await eventually(lambda: cluster.traffic == {1: 100, 2: 0}, "all traffic back on revision 1")
        assert [call.weights for call in cluster.called("set_traffic")][:2] == [{1: 100, 2: 0}, {1: 80, 2: 20}]
        with pytest.raises(WorkflowUpdateFailedError):  # a second rollout waits for this one
            await roll(harness, handle, bigger_context(definition, 2048), RolloutStrategy(), revision=3)
        await harness.latest(handle).execute_update(
            "rollout_command", RolloutCommand(action=RolloutAction.ROLLBACK, by=OWNER.user), result_type=Rollout)
        back = await harness.wait_status(
            handle, lambda s: s.rollout is not None and s.rollout.phase.value == "rolled_back", "rolled back")
        assert back.revision == 1 and {rev for _, rev in serving_copies(back)} == {1}
        assert len(serving_copies(back)) == 2 and cluster.traffic is None
        assert back.rolled_back == (2,)  # listed "rolled back" even after a later rollout (issue 31)
        await harness.stop(handle)


async def test_promote_finishes_a_healthy_canary_at_once(harness: Harness) -> None:
    cluster = cluster_of(3)
    definition = pool_definition(min_replicas=1, max_replicas=2)
    async with harness.running(cluster):
        handle = await harness.start(definition)
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 1, "a ready copy")
        await roll(harness, handle, bigger_context(definition),
                   RolloutStrategy(kind=RolloutKind.CANARY, min_ready_s=0, steps=(50, 100), step_hold_s=600))
        await harness.wait_status(handle, lambda s: s.rollout is not None and s.rollout.step_started_at is not None,
                                  "the first step live")
        await eventually(lambda: cluster.traffic == {1: 50, 2: 50}, "half the traffic on the canary")
        await harness.latest(handle).execute_update(
            "rollout_command", RolloutCommand(action=RolloutAction.PROMOTE, by=OWNER.user), result_type=Rollout)
        final = await harness.wait_status(
            handle, lambda s: s.rollout is not None and s.rollout.phase.value == "complete", "promoted")
        assert final.revision == 2 and [rev for _, rev in serving_copies(final)] == [2]
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await harness.latest(handle).execute_update(
                "rollout_command", RolloutCommand(action=RolloutAction.PAUSE), result_type=Rollout)
        assert "No rollout is in progress" in str(getattr(refused.value.cause, "message", ""))
        await harness.stop(handle)


async def test_a_rollout_continues_in_its_phase_after_the_control_worker_restarts(harness: Harness) -> None:
    cluster = cluster_of(4)
    definition = pool_definition(min_replicas=2, max_replicas=2)
    async with harness.running(cluster, control=False):
        async with harness.control_worker(cluster):
            handle = await harness.start(definition)
            await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two ready copies")
            await roll(harness, handle, bigger_context(definition),
                       RolloutStrategy(kind=RolloutKind.BLUE_GREEN, min_ready_s=0, rollback_window_s=4))
            switched = await harness.wait_status(
                handle, lambda s: s.rollout is not None and s.rollout.phase.value == "switched", "switched")
        # The control worker is gone: the copies run on (their node agents are up); nothing else moves.
        async with harness.control_worker(cluster):
            final = await harness.wait_status(
                handle, lambda s: s.rollout is not None and s.rollout.phase.value == "complete", "complete")
        assert switched.rollout is not None and final.rollout is not None
        assert final.rollout.switched_at == switched.rollout.switched_at, "the switch was not done again"
        assert [call.weights for call in cluster.called("set_traffic")] == [{1: 100, 2: 0}, {1: 0, 2: 100}, None]
        assert final.revision == 2 and {rev for _, rev in serving_copies(final)} == {2}
        async with harness.control_worker(cluster):
            await harness.stop(handle)


async def test_a_drain_scales_in_with_its_grace_and_a_moved_copy_is_replaced_first(harness: Harness) -> None:
    cluster = cluster_of(3)
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=3))
        wf = handle.id
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 1, "a ready copy")
        await harness.latest(handle).execute_update(
            "scale", ScaleRequest(replicas=2), result_type=ScaleResult)
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 2, "two ready copies")
        await harness.settled([f"{wf}.copy-0", f"{wf}.copy-1"])
        moved = await harness.latest(handle).execute_update(
            "move_copies", MoveRequest(copy_ids=(f"{wf}.copy-0", "not-a-copy"), grace_s=7, reason="node n0 drained"),
            result_type=int)
        assert moved == 1
        status = await harness.wait_status(
            handle, lambda s: f"{wf}.copy-0" not in {c for c, _ in serving_copies(s)} and len(serving_copies(s)) == 2,
            "copy-0 replaced")
        assert [d.grace_s for d in cluster.called("drain_replica") if d.copy_id == f"{wf}.copy-0"] == [7]
        assert "copies_moving" in event_kinds(status)
        await harness.settled(c for c, _ in serving_copies(status))
        await harness.latest(handle).execute_update(
            "scale", ScaleRequest(replicas=1, source="drain", grace_s=3), result_type=ScaleResult)
        await harness.wait_status(handle, lambda s: len(s.copies) == 1, "one copy left")
        assert cluster.called("drain_replica")[-1].grace_s == 3
        await harness.stop(handle)


async def test_a_moved_copy_of_a_one_copy_pool_serves_until_its_replacement_is_ready(harness: Harness) -> None:
    """Issue 31, item 2: `node drain` of a one-copy pool stopped the old copy 4 s before its replacement was
    ready (a request held meanwhile). The moved copy takes traffic until the replacement is published."""
    cluster = cluster_of(2)
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=1))
        wf = handle.id
        await harness.wait_status(handle, lambda s: len(serving_copies(s)) == 1, "a ready copy")
        await harness.settled([f"{wf}.copy-0"])
        cluster.publish_gate = asyncio.Event()  # the replacement's publish waits until the test says
        moved = await harness.latest(handle).execute_update(
            "move_copies", MoveRequest(copy_ids=(f"{wf}.copy-0",), grace_s=5, reason="node n0 drained"),
            result_type=int)
        assert moved == 1
        await eventually(lambda: any(r.copy_id == f"{wf}.copy-1" for r in cluster.called("publish_replica")),
                         "the replacement to reach its publish")
        status = await harness.status(handle)
        assert cluster.called("drain_replica") == [] and f"{wf}.copy-0" in {c for c, _ in serving_copies(status)}
        cluster.publish_gate.set()
        done = await harness.wait_status(
            handle, lambda s: {c for c, _ in serving_copies(s)} == {f"{wf}.copy-1"}, "copy-1 alone serving")
        assert [d.copy_id for d in cluster.called("drain_replica")] == [f"{wf}.copy-0"]
        assert "copies_moving" in event_kinds(done)
        await harness.stop(handle)
