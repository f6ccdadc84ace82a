"""PoolWorkflow continues as new (forced cheaply with `continue_as_new_after_events`) and carries its pool:
the running copies and the front process are re-attached, never restarted; scaling, draining and stopping work
on copies an earlier run started; events, desired size and budgets survive."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowExecutionStatus

from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import TIMINGS, Harness, copy_ids, event_kinds, node_ids, pool_definition
from workflows.payloads import Phase, ScaleRequest
from workflows.pool_workflow import PoolWorkflow

pytestmark = pytest.mark.timeout(180)

FORCED = TIMINGS.model_copy(update={"continue_as_new_after_events": 25})


async def test_a_serving_pool_continues_as_new_with_its_copies_running_on(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(3)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=2, max_replicas=3, replace_failed_copies=2,
                                                     proxy=True), timings=FORCED)
        wf = handle.id
        status = await harness.wait_status(
            handle, lambda s: s.phase is Phase.READY and event_kinds(s).count("copy_ready") == 2
            and {"continued_as_new", "service_ready"} <= set(event_kinds(s)),
            "two ready copies behind a live proxy, after a continue-as-new")
        first_run = await harness.client.get_workflow_handle(wf, run_id=handle.result_run_id).describe()
        assert first_run.status is WorkflowExecutionStatus.CONTINUED_AS_NEW
        # Carried: the events of the earlier run, the desired size; nothing placed or started twice.
        kinds = event_kinds(status)
        assert kinds[0] == "submitted" and kinds.count("copy_ready") == 2
        assert status.desired_copies == 2
        assert sorted(r.copy_id for r in cluster.called("reserve_placement")) == [f"{wf}.copy-0", f"{wf}.copy-1"]
        assert len(cluster.called("run_rank")) == 2 and len(cluster.called("run_service")) == 1
        for copy_id in (f"{wf}.copy-0", f"{wf}.copy-1"):
            assert (await harness.client.get_workflow_handle(copy_id).describe()).status \
                is WorkflowExecutionStatus.RUNNING

        # The new run scales up with a fresh index; once a later run carries that copy too, scaling in drains it.
        continued = event_kinds(status).count("continued_as_new")
        await harness.latest(handle).execute_update(PoolWorkflow.scale, ScaleRequest(replicas=3, reason="test"))
        status = await harness.wait_status(
            handle, lambda s: len(copy_ids(s)) == 3 and event_kinds(s).count("continued_as_new") > continued,
            "a third copy, carried by a later run")
        assert f"{wf}.copy-2" in copy_ids(status)
        await harness.settled(copy_ids(status))
        await harness.latest(handle).execute_update(PoolWorkflow.scale, ScaleRequest(replicas=2))
        status = await harness.wait_status(handle, lambda s: len(copy_ids(s, ready_only=False)) == 2, "two copies")
        assert [d.copy_id for d in cluster.called("drain_replica")] == [f"{wf}.copy-2"]
        assert all(rank.cancelled for rank in cluster.copy_ranks(f"{wf}.copy-2"))
        assert f"{wf}.copy-2" not in cluster.placements and len(cluster.called("run_rank")) == 3

        final = await harness.stop(handle)
        assert final.phase is Phase.STOPPED and event_kinds(final)[0] == "submitted"
        assert cluster.placements == {} and cluster.published == {} and cluster.fronts_running == 0
        assert all(rank.cancelled and not rank.running for rank in cluster.ranks.values())


async def test_a_copy_that_fails_after_a_continue_as_new_is_replaced_from_the_carried_budget(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(2)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, replace_failed_copies=1), timings=FORCED)
        wf = handle.id
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 1 and "continued_as_new" in event_kinds(s),
                                  "a ready copy after a continue-as-new")
        cluster.crash(f"{wf}.copy-0", exit_code=1)
        status = await harness.wait_status(handle, lambda s: copy_ids(s) == {f"{wf}.copy-1"}, "copy-1 in its place")
        assert [e.copy_id for e in status.events if e.kind == "copy_failed"] == [f"{wf}.copy-0"]
        assert "copy_replaced" in event_kinds(status)
        final = await harness.stop(handle)
        assert final.phase is Phase.STOPPED and cluster.placements == {}
