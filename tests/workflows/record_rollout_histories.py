"""Record the history test_replay.py replays for rollouts (issue 17): a 2-copy pool rolled to revision 2 by a
blue-green rollout (split set, switched, old set stopped after its window), then stopped. Plain pydantic
payloads. Run by hand when its shape changes: `.venv/bin/python -m tests.workflows.record_rollout_histories`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from berth.contracts import RolloutKind, RolloutStrategy
from berth.security import SigningKey
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import Harness, node_ids, pool_definition
from tests.workflows.record_histories import record
from tests.workflows.test_rollouts import bigger_context, roll


async def _scenario(client: Client, keys: Path) -> dict[str, str]:
    harness = Harness(client=client, signing=SigningKey.load_or_create(keys))
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(4)])
    definition = pool_definition(min_replicas=2, max_replicas=2)
    async with harness.running(cluster):
        handle = await harness.start(definition)
        await harness.wait_status(handle, lambda s: sum(c.status.value == "ready" for c in s.copies) == 2, "2 ready")
        await roll(harness, handle, bigger_context(definition),
                   RolloutStrategy(kind=RolloutKind.BLUE_GREEN, min_ready_s=0, rollback_window_s=1))
        await harness.wait_status(handle, lambda s: s.rollout is not None and s.rollout.phase.value == "complete",
                                  "the rollout to complete")
        await harness.stop(handle)
        history = await handle.fetch_history()
    return {"ServiceWorkflow-13-rollout": history.to_json()}


async def main() -> None:
    await record(_scenario)


if __name__ == "__main__":
    asyncio.run(main())
