"""The control worker's Slurm activities on a real one-machine Slurm cluster (issue 35): a 2-node copy submitted
once (a second submit takes the queued job back), ready only with a rank on each node and rank 0 serving its key
holder, a rank's death ending the job with srun's rank and node and sacct's state, a refusal in Slurm's words,
a wait for the job's start that tells no "None" reason, and a cancel that waits until squeue lists the job no more."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.slurm_copies import SlurmCopyActivities, failed_rank, for_cluster
from berth.security import ReplicaKeys
from catalog.definition import EngineSpec, SlurmPick
from tests.slurm_cluster import SLURM_GROUP, SlurmCluster
from workflows.payloads import CopyInput, HealthCheck
from workflows.slurm_payloads import SlurmReadyCheck, SlurmStartWait

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group(SLURM_GROUP), pytest.mark.timeout(180)]


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, tmp_path: Path) -> SlurmCopyActivities:
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return for_cluster(slurm_cluster.settings(engine="simulator"), ReplicaKeys.load_or_create(tmp_path / "keys"),
                       environ, state_dir=tmp_path)


def _copy(name: str, nodes: int = 2, gpus: int = 1, slurm: SlurmPick | None = None) -> CopyInput:
    return CopyInput(slurm=slurm, workflow_id=name, endpoint_id=f"ep-{name}", copy_id=f"{name}.copy-0", copy_index=0,
                     engine=EngineSpec(served_model_name="tiny", max_model_len=512, startup_timeout_s=60),
                     nodes=nodes, gpus_per_node=gpus, gpu_memory_gb=0, model_dir="/models/tiny",
                     parent_workflow_id=name)


def _uid_and_hidden(pid: int, path: Path) -> tuple[int, bool]:
    """Whom process `pid` runs as, and whether `path` is an empty tmpfs in its mount namespace (hidden)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = int(next(line.split()[1] for line in status if line.startswith("Uid:")))
    mounts = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    return uid, any(line.split()[4] == os.path.realpath(path) and " - tmpfs " in line for line in mounts)


async def test_a_copy_job_is_submitted_once_ready_on_both_nodes_and_ends_with_the_rank_that_died(
        slurm: SlurmCopyActivities, tmp_path: Path) -> None:
    env = ActivityEnvironment()
    copy = _copy("wf-s1")
    job = await env.run(slurm.submit_slurm_copy, copy)
    again = await env.run(slurm.submit_slurm_copy, copy)  # a retried attempt: the queued job, not a second one
    assert again.job_id == job.job_id and again.adopted and not job.adopted
    view = await env.run(slurm.wait_slurm_copy_ready, SlurmReadyCheck(job=job, url="", model_id="tiny", nodes=2,
                                                                      timeout_s=60))
    assert view.nodes == ("n1", "n2") and view.url is not None and view.ranks_reported == 2
    key = slurm.replica_keys.for_copy(copy.copy_id)
    async with httpx.AsyncClient(timeout=5) as client:
        assert (await client.get(f"{view.url}/v1/models", headers={"Authorization": f"Bearer {key}"})).is_success
        assert (await client.get(f"{view.url}/v1/models")).status_code == 401
    # The worker is root: each engine runs as its owner's rank uid, with the worker's state dir (its keys) hidden.
    rank0 = json.loads((Path(job.job_dir) / "rank-0.json").read_text())
    users = await slurm._jail_users()
    assert users is not None
    assert _uid_and_hidden(int(rank0["pid"]), tmp_path) == (users.for_ranks(copy.owner, copy.workflow_id).uid, True)
    rank1 = json.loads((Path(job.job_dir) / "rank-1.json").read_text())
    os.kill(rank1["pid"], signal.SIGKILL)
    end = await asyncio.wait_for(env.run(slurm.watch_slurm_copy, job), 60)
    assert end.state == "FAILED" and "on n[1-2]" in end.message
    assert end.failure is not None and (end.failure.rank, end.failure.node_id) == (1, "n2")
    assert end.failure.signal == 9 and "srun: error: n2: task 1: Killed" in end.failure.log_tail
    await env.run(slurm.cancel_slurm_copy, job)  # already ended: nothing to cancel, and no error


async def test_a_job_slurm_refuses_is_refused_in_slurms_words_and_a_cancel_waits_until_it_is_gone(
        slurm: SlurmCopyActivities) -> None:
    env = ActivityEnvironment()
    with pytest.raises(ApplicationError, match="Requested node configuration is not available") as refused:
        await env.run(slurm.submit_slurm_copy, _copy("wf-s2", nodes=1, gpus=8))
    assert refused.value.type == "SlurmRefused" and refused.value.non_retryable
    job = await env.run(slurm.submit_slurm_copy, _copy("wf-s3", nodes=1))
    started = await env.run(slurm.wait_slurm_copy_started, SlurmStartWait(job=job))
    while started.pending:  # the partition was busy: Slurm's reason was told, then the wait goes on until it starts
        assert started.reason not in ("", "None")
        started = await env.run(slurm.wait_slurm_copy_started, SlurmStartWait(job=job, told=started.reason))
    assert started.state == "RUNNING"
    await env.run(slurm.wait_slurm_copy_ready, SlurmReadyCheck(job=job, url="", model_id="tiny", nodes=1,
                                                               timeout_s=60))
    await env.run(slurm.cancel_slurm_copy, job)
    assert (await env.run(slurm.slurm_copy_state, job)).state in ("GONE", "CANCELLED")


def test_srun_names_the_rank_that_ended_the_job() -> None:
    exited = failed_rank("starting\nsrun: error: gpu07: task 3: Exited with exit code 2\nsrun: Terminating")
    assert exited is not None and (exited.rank, exited.node_id, exited.exit_code) == (3, "gpu07", 2)
    assert failed_rank("all good") is None


async def test_a_hung_engine_is_called_hung_by_its_liveness_probe(slurm: SlurmCopyActivities) -> None:
    env = ActivityEnvironment()
    job = await env.run(slurm.submit_slurm_copy, _copy("wf-s4", nodes=1))
    try:
        view = await env.run(slurm.wait_slurm_copy_ready, SlurmReadyCheck(job=job, url="", model_id="tiny", nodes=1,
                                                                          timeout_s=60))
        assert view.url is not None
        check = HealthCheck(url=view.url, copy_id="wf-s4.copy-0", interval_s=0.1, timeout_s=0.5, failures_to_fail=2)
        beats = asyncio.Queue[object]()
        env.on_heartbeat = lambda *details: beats.put_nowait(details)
        probing = asyncio.ensure_future(env.run(slurm.watch_slurm_copy_health, check))
        for _ in range(2):  # its second heartbeat comes a second in: by then its probes (every 0.1 s) were answered
            await asyncio.wait_for(beats.get(), 10)
        assert not probing.done()
        engine = json.loads((Path(job.job_dir) / "rank-0.json").read_text())["pid"]
        os.kill(engine, signal.SIGSTOP)  # alive, answering nothing
        try:
            hung = await asyncio.wait_for(probing, 30)
        finally:
            os.kill(engine, signal.SIGCONT)
        assert hung.startswith("/health failed 2 times in a row (timeout after 0.5 s)")
    finally:
        await env.run(slurm.cancel_slurm_copy, job)


async def test_the_values_partition_and_time_limit_reach_the_job_and_a_pick_no_longer_allowed_fails_the_copy(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """Checked at submission and again at each job: a setting changed since then fails the copy in one line."""
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    keys = ReplicaKeys.load_or_create(tmp_path / "keys")
    allowing = for_cluster(slurm_cluster.settings(engine="simulator", selectable_partitions=["long"],
                                                  max_time_limit="1-00:00:00"), keys, environ)
    env = ActivityEnvironment()
    job = await env.run(allowing.submit_slurm_copy, _copy("wf-s5", nodes=1, gpus=0,
                                                          slurm=SlurmPick(partition="long", time_limit="90")))
    try:
        shown = slurm_cluster.command("squeue", "-h", "-j", str(job.job_id), "-o", "%P|%l").strip()
        assert shown == "long|1:30:00"
    finally:
        await env.run(allowing.cancel_slurm_copy, job)
    strict = for_cluster(slurm_cluster.settings(engine="simulator"), keys, environ)
    no_pick = "SlurmPartition=long: this cluster lets no workflow pick a partition"
    with pytest.raises(ApplicationError, match=no_pick) as refused:
        await env.run(strict.submit_slurm_copy, _copy("wf-s6", nodes=1, gpus=0, slurm=SlurmPick(partition="long")))
    assert refused.value.type == "SlurmRefused" and refused.value.non_retryable
    assert not (slurm_cluster.root / "shared" / "jobs" / "wf-s6.copy-0").exists()  # refused before any file
