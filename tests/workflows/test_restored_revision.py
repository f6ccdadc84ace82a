"""A restored workflow's pool (server/backup.py) starts serving its latest revision under that revision's number:
its copies say so, and so does the pool, so the next rollout is numbered after the revisions the store keeps."""

from __future__ import annotations

import pytest

from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.harness import Harness, copy_ids, node_ids, pool_definition

pytestmark = pytest.mark.timeout(120)


async def test_a_pool_started_at_revision_3_serves_it_as_3(harness: Harness) -> None:
    cluster = FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(1)])
    async with harness.running(cluster):
        handle = await harness.start(pool_definition(min_replicas=1), revision=3)
        status = await harness.wait_status(handle, lambda s: copy_ids(s) == {f"{handle.id}.copy-0"}, "copy-0 ready")
        assert status.revision == 3 and [c.revision for c in status.copies] == [3]
        assert [record.revision for record in cluster.called("publish_replica")] == [3]  # routed as revision 3
        await harness.stop(handle)
