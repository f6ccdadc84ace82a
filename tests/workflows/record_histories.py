"""Record the histories test_replay.py replays for the shape after `front-child-and-continue-as-new`: a Proxy=true
pool forced to continue as new while serving, scaled in, then stopped (both of its runs), its FrontWorkflow and a
copy. Plain pydantic payloads (no codec), so the files hold no ciphertext. Run once, by hand, when the shape
changes: `.venv/bin/python -m tests.workflows.record_histories`."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from berth.security import SigningKey
from berth.settings import venv_bin
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import TIMINGS, Harness, copy_ids, event_kinds, node_ids, pool_definition
from workflows.payloads import ScaleRequest
from workflows.pool_workflow import PoolWorkflow

HISTORIES = Path(__file__).parent / "histories"


async def _scenario(client: Client, keys: Path) -> dict[str, str]:
    harness = Harness(client=client, signing=SigningKey.load_or_create(keys))
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(2)])
    timings = TIMINGS.model_copy(update={"continue_as_new_after_events": 25})
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=2, proxy=True), timings=timings)
        await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 1 and "continued_as_new" in event_kinds(s)
                                  and "service_ready" in event_kinds(s), "a ready pool, continued as new")
        await harness.latest(handle).execute_update(PoolWorkflow.scale, ScaleRequest(replicas=2))
        status = await harness.wait_status(handle, lambda s: len(copy_ids(s)) == 2, "two copies")
        await harness.settled(copy_ids(status))
        await harness.latest(handle).execute_update(PoolWorkflow.scale, ScaleRequest(replicas=1))
        await harness.wait_status(handle, lambda s: len(copy_ids(s, ready_only=False)) == 1, "one copy")
        await harness.stop(handle)
        first = client.get_workflow_handle(handle.id, run_id=handle.result_run_id)
        files = {"ServiceWorkflow-7-continued": await first.fetch_history(),
                 "ServiceWorkflow-8-after-continue": await harness.latest(handle).fetch_history(),
                 "FrontWorkflow-9": await client.get_workflow_handle(f"{handle.id}.front").fetch_history(),
                 "CopyWorkflow-10": await client.get_workflow_handle(f"{handle.id}.copy-0").fetch_history()}
    return {name: history.to_json() for name, history in files.items()}


async def record(scenario: Callable[[Client, Path], Awaitable[dict[str, str]]]) -> None:
    """Run `scenario` on a fresh dev server and write the histories it answers into histories/."""
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(venv_bin("temporal")),
                                                data_converter=pydantic_data_converter)
    try:
        with tempfile.TemporaryDirectory() as keys:
            for name, text in (await scenario(env.client, Path(keys))).items():
                (HISTORIES / f"{name}.json").write_text(text)
    finally:
        await env.shutdown()


async def main() -> None:
    await record(_scenario)


if __name__ == "__main__":
    asyncio.run(main())
