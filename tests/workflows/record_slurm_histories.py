"""Record the history test_replay.py replays for `slurm-start-wait`: a Slurm copy whose job was pending (Resources)
while the copy waited with workflow timers between two `slurm_copy_state` looks, then ran, served and was stopped.
Recorded on the code before the patch (main at 021fd49), run by hand when the shape changes:
`.venv/bin/python -m tests.workflows.record_slurm_histories`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from berth.security import SigningKey
from tests.workflows.fake_cluster import FakeCluster
from tests.workflows.fake_slurm import FakeSlurm
from tests.workflows.harness import Harness, copy_ids, event_kinds, pool_definition
from tests.workflows.record_histories import record


async def _pending_then_served(client: Client, keys: Path) -> dict[str, str]:
    harness = Harness(client=client, signing=SigningKey.load_or_create(keys))
    slurm, cluster = FakeSlurm(), FakeCluster(nodes=[])
    async with harness.running(cluster, slurm=slurm):
        handle = await harness.start(pool_definition(min_replicas=1), placement_backend="slurm")
        copy = f"{handle.id}.copy-0"
        await harness.wait_status(handle, lambda s: "scheduling_blocked" in event_kinds(s), "the job pending")
        await asyncio.sleep(1)  # a few timers between looks at the pending job
        slurm.run(copy)
        await harness.wait_status(handle, lambda s: copy_ids(s) == {copy}, "the copy ready")
        await harness.stop(handle)
        history = await client.get_workflow_handle(copy).fetch_history()
    return {"SlurmCopyWorkflow-16-pending-timers": history.to_json()}


if __name__ == "__main__":
    asyncio.run(record(_pending_then_served))
