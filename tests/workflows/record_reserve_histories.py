"""Record the histories test_replay.py replays for `reserve-settles-before-release`: a pool stopped while its
copy's reserve_placement was still running (the control plane answers only after the stop reached the copy),
so the copy let the attempt end, then released. Run once, by hand, when the shape changes:
`.venv/bin/python -m tests.workflows.record_reserve_histories`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from berth.security import SigningKey
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import OWNER, Harness, eventually, node_ids, pool_definition
from tests.workflows.record_histories import record
from workflows.payloads import StopRequest
from workflows.pool_workflow import PoolWorkflow


async def _stopped_while_reserving(client: Client, keys: Path) -> dict[str, str]:
    harness = Harness(client=client, signing=SigningKey.load_or_create(keys))
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)], reserve_gate=asyncio.Event())
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1, max_replicas=1))
        await eventually(lambda: cluster.called("reserve_placement"), "the copy's reserve under way")
        await handle.signal(PoolWorkflow.stop, StopRequest(by=OWNER.user))
        copy = client.get_workflow_handle(f"{handle.id}.copy-0")

        async def cancel_reached_the_copy() -> bool:
            events = [e.event_type for e in (await copy.fetch_history()).events]
            return EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED in events

        await eventually(cancel_reached_the_copy, "the stop to reach the reserving copy")
        assert cluster.reserve_gate is not None
        cluster.reserve_gate.set()
        await asyncio.wait_for(handle.result(), 60)
        assert cluster.placements == {}
        files = {"ServiceWorkflow-14-stopped-reserving": await handle.fetch_history(),
                 "CopyWorkflow-15-stopped-reserving": await copy.fetch_history()}
    return {name: history.to_json() for name, history in files.items()}


if __name__ == "__main__":
    asyncio.run(record(_stopped_while_reserving))
