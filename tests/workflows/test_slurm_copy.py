"""SlurmCopyWorkflow under its pool, with the Slurm activities mocked (issue 35): a pending job is
`scheduling_blocked` with Slurm's reason (never failed), a running job's copy is published once ready, a rank's
death ends the job and the copy is reported with the rank, node and exit status and re-placed as a new job, a
refusal is Slurm's own line, and a stop cancels the running job."""

from __future__ import annotations

import pytest

from tests.workflows.fake_cluster import FakeCluster
from tests.workflows.fake_slurm import FakeSlurm
from tests.workflows.harness import TIMINGS, Harness, copy_ids, event_kinds, pool_definition
from workflows.payloads import CopyStatus, Phase, RankEnd

pytestmark = pytest.mark.timeout(120)


async def test_a_pending_job_waits_with_slurms_reason_then_serves_and_is_replaced_as_a_new_job(
        harness: Harness) -> None:
    slurm, cluster = FakeSlurm(), FakeCluster(nodes=[])
    async with harness.running(cluster, slurm=slurm):
        handle = await harness.start(pool_definition(min_replicas=1, replace_failed_copies=1, nodes=2),
                                     placement_backend="slurm")
        first, second = f"{handle.id}.copy-0", f"{handle.id}.copy-1"
        status = await harness.wait_status(handle, lambda s: "scheduling_blocked" in event_kinds(s),
                                           "copy-0 blocked while its job is pending")
        blocked = next(e for e in status.events if e.kind == "scheduling_blocked")
        assert blocked.message == f"Slurm job {slurm.jobs[first].ref.job_id} is pending: Resources"
        assert status.copies[0].status is CopyStatus.SCHEDULING and "failed" not in event_kinds(status)

        slurm.run(first)
        status = await harness.wait_status(handle, lambda s: copy_ids(s) == {first}, "copy-0 ready")
        (record,) = [r for r in cluster.called("publish_replica") if r.copy_id == first]
        assert record.url == f"http://sn0:{20000 + slurm.jobs[first].ref.job_id}"
        assert status.copies[0].nodes == ("sn0", "sn1")

        slurm.start_at_once = True
        slurm.fail(first, rank=1, node="sn1", exit_code=3)
        status = await harness.wait_status(handle, lambda s: copy_ids(s) == {second}, "copy-1 ready as a new job")
        failed = next(e for e in status.events if e.kind == "copy_failed")
        assert failed.ended == RankEnd(rank=1, node_id="sn1", exit_code=3, reason="exited")
        assert "rank 1 on sn1: Exited with exit code 3" in failed.message
        assert [c.copy_id for c in slurm.called("submit_slurm_copy")] == [first, second]
        assert slurm.jobs[first].ref.job_id != slurm.jobs[second].ref.job_id
        await harness.stop(handle)
        assert slurm.jobs[second].state == "CANCELLED"
        assert {j.copy_id for j in slurm.called("cancel_slurm_copy")} == {first, second}
        # Each copy held its reservation (quotas count it, its publish needs it) until it ended.
        assert [r.placed_by for r in cluster.called("reserve_placement")] == ["slurm", "slurm"]
        assert set(cluster.called("release_placement")) >= {first, second} and not cluster.placements


async def test_a_quota_keeps_the_copy_waiting_with_the_policys_line_and_no_job_is_submitted(
        harness: Harness) -> None:
    line = "Refused by policy group/ml: max_gpus 2, 2 in use, this needs 1 more."
    slurm, cluster = FakeSlurm(start_at_once=True), FakeCluster(nodes=[], quota_line=line)
    async with harness.running(cluster, slurm=slurm):
        handle = await harness.start(pool_definition(min_replicas=1), placement_backend="slurm")
        status = await harness.wait_status(handle, lambda s: "scheduling_blocked" in event_kinds(s),
                                           "the copy blocked by the quota")
        assert next(e for e in status.events if e.kind == "scheduling_blocked").message == line
        assert slurm.called("submit_slurm_copy") == []
        cluster.quota_line = None
        await harness.wait_status(handle, lambda s: copy_ids(s) == {f"{handle.id}.copy-0"}, "served once lifted")
        await harness.stop(handle)


async def test_a_job_slurm_refuses_fails_the_copy_with_slurms_words(harness: Harness) -> None:
    line = ("Slurm refused the job: sbatch: error: Batch job submission failed: Requested node configuration "
            "is not available")
    slurm = FakeSlurm(refuse=line)
    async with harness.running(FakeCluster(nodes=[]), slurm=slurm):
        handle = await harness.start(pool_definition(min_replicas=1, replace_failed_copies=0),
                                     placement_backend="slurm")
        status = await harness.wait_status(handle, lambda s: s.phase is Phase.FAILED, "the pool failed")
        assert any(line in e.message for e in status.events if e.kind == "copy_failed")


async def test_a_hung_engine_ends_its_job_and_a_new_job_serves_in_its_place(harness: Harness) -> None:
    """A livenessProbe as on Berth's nodes: rank 0's /health unanswered ends the copy as a unit (its job cancelled)."""
    slurm, cluster = FakeSlurm(start_at_once=True), FakeCluster(nodes=[])
    async with harness.running(cluster, slurm=slurm):
        handle = await harness.start(pool_definition(min_replicas=1, replace_failed_copies=1),
                                     TIMINGS.model_copy(update={"health_check_interval_s": 0.1}),
                                     placement_backend="slurm")
        first, second = f"{handle.id}.copy-0", f"{handle.id}.copy-1"
        await harness.wait_status(handle, lambda s: copy_ids(s) == {first}, "copy-0 ready")
        [check] = slurm.called("watch_slurm_copy_health")
        assert check.url == f"http://sn0:{20000 + slurm.jobs[first].ref.job_id}" and check.interval_s == 0.1
        slurm.hung[first] = "/health failed 3 times in a row (timeout after 2 s)"
        status = await harness.wait_status(handle, lambda s: copy_ids(s) == {second}, "copy-1 serving instead")
        failed = next(e for e in status.events if e.kind == "copy_failed")
        assert failed.ended == RankEnd(rank=0, node_id="sn0", reason="unhealthy")
        assert "rank 0's engine is hung: /health failed 3 times in a row" in failed.message
        assert slurm.jobs[first].state == "CANCELLED"  # no rank of it outlives the copy
        await harness.stop(handle)
