"""Record the histories test_replay.py replays for model jobs (issue 16): a pool serving `model://smol` that
waited for the model's job (Resolving … Ready, signalled to it), then stopped, and that job. Plain pydantic
payloads. Run by hand when their shape changes: `.venv/bin/python -m tests.workflows.record_model_histories`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from berth.security import SigningKey
from server.model_jobs import job_workflow_id
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.fake_models import FakeModels
from tests.workflows.harness import Harness, event_kinds, node_ids, pool_definition
from tests.workflows.record_histories import record
from workflows.payloads import Phase


async def _scenario(client: Client, keys: Path) -> dict[str, str]:
    harness = Harness(client=client, signing=SigningKey.load_or_create(keys))
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)])
    models = FakeModels(client, node_ids(1)[0])
    async with harness.running(cluster, models):
        handle = await harness.start(pool_definition().model_copy(update={"model_ref": "model://smol"}))
        await harness.wait_status(handle, lambda s: "waiting_for_model" in event_kinds(s), "the wait")
        models.download_gate.set()
        await harness.wait_status(handle, lambda s: s.phase is Phase.READY, "the pool to serve")
        await harness.stop(handle)
        assert models.job_id is not None
        job = client.get_workflow_handle(job_workflow_id(models.job_id))
        files = {"ServiceWorkflow-12-model": await handle.fetch_history(),
                 "ModelJobWorkflow-11": await job.fetch_history()}
    return {name: history.to_json() for name, history in files.items()}


async def main() -> None:
    await record(_scenario)


if __name__ == "__main__":
    asyncio.run(main())
