"""Record the history test_replay.py replays for `front-restart-at-once`: a Proxy=true pool's FrontWorkflow whose
LiteLLM crashed once and was started again after the 1 s back-off that came before the patch (a workflow timer),
then stopped. Recorded on the code before the patch (main at 643b6d0), run by hand when the shape changes:
`.venv/bin/python -m tests.workflows.record_front_restart_histories`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from berth.security import SigningKey
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import Harness, event_kinds, node_ids, pool_definition
from tests.workflows.record_histories import record


async def _front_restarted(client: Client, keys: Path) -> dict[str, str]:
    harness = Harness(client=client, signing=SigningKey.load_or_create(keys))
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(proxy=True))
        await harness.wait_status(handle, lambda s: "service_ready" in event_kinds(s), "the proxy ready")
        cluster.crash_front(exit_code=3)
        await harness.wait_status(handle, lambda s: event_kinds(s).count("service_ready") == 2, "the proxy again")
        await harness.stop(handle)
        front = await client.get_workflow_handle(f"{handle.id}.front").fetch_history()
    return {"FrontWorkflow-17-restarted": front.to_json()}


if __name__ == "__main__":
    asyncio.run(record(_front_restarted))
