"""The endpoint's front process (its LiteLLM proxy) as a child FrontWorkflow beside the pool's copies: the
endpoint routes to it once live, the pool is ready only with it, a crashed one is started again, and a stop
stops it and gives its port back."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowExecutionStatus

from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import Harness, copy_ids, event_kinds, node_ids, pool_definition
from workflows.payloads import Phase

pytestmark = pytest.mark.timeout(120)


async def test_the_front_process_runs_as_a_child_and_is_restarted_when_it_exits(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(proxy=True))
        wf = handle.id
        endpoint_id = harness.inputs[wf].endpoint_id
        status = await harness.wait_status(
            handle, lambda s: s.phase is Phase.READY and "service_ready" in event_kinds(s), "pool and proxy ready")
        assert copy_ids(status) == {f"{wf}.copy-0"}
        front = harness.client.get_workflow_handle(f"{wf}.front")
        description = await front.describe()
        assert description.workflow_type == "FrontWorkflow" and description.parent_id == wf
        first_url = cluster.routes[endpoint_id]
        assert first_url is not None and cluster.fronts_running == 1

        cluster.crash_front(exit_code=3)
        status = await harness.wait_status(
            handle, lambda s: event_kinds(s).count("service_ready") == 2, "the proxy started again and routed")
        exited = [e.message for e in status.events if e.kind == "service_exited"]
        assert len(exited) == 1 and "exited with status 3" in exited[0] and "restarting it now" in exited[0]
        assert len(cluster.called("run_service")) == 2 and cluster.routes[endpoint_id] not in (None, first_url)
        assert status.phase is Phase.READY

        final = await harness.stop(handle)
        assert final.phase is Phase.STOPPED
        assert (await front.describe()).status is WorkflowExecutionStatus.COMPLETED
        assert cluster.routes[endpoint_id] is None and cluster.fronts_running == 0
        assert f"{wf}.litellm" in cluster.called("release_placement")


async def test_a_pool_behind_a_proxy_is_not_ready_before_its_proxy(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)])
    cluster.front_goes_live = False
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(proxy=True))
        status = await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 1, "a ready copy")
        assert status.phase is Phase.STARTING
        cluster.front_goes_live = True
        await harness.wait_status(handle, lambda s: s.phase is Phase.READY, "ready once its proxy is live")
        await harness.stop(handle)
