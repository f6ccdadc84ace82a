"""Berth's Slurm commands and rank launcher on a real one-machine Slurm cluster (tests/slurm_cluster.py): a 2-node
copy job whose rank 0 serves, a rank's death ending the job as a unit, a request Slurm can never run refused in
Slurm's words, a busy partition's pending reason, and a cancel that waits until squeue lists the job no more."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from activities.slurm_job_files import engine_environment_for, job_description, rank_argvs, write_job_dir
from berth.processes import berth_python
from berth.slurm.commands import SlurmCommands, SlurmRefused
from berth.slurm.job_script import CopyJob, launcher_argv, render
from catalog.definition import EngineSpec
from rank import slurm_rank
from tests.slurm_cluster import SLURM_GROUP, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group(SLURM_GROUP), pytest.mark.timeout(180)]

KEY = "sk-copy-key-for-this-test"


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    return slurm_cluster


@pytest.fixture
def commands(cluster: SlurmCluster) -> SlurmCommands:
    return SlurmCommands(cluster.settings(), cluster.environment)


def _job_dir(cluster: SlurmCluster, copy_id: str, nodes: int) -> Path:
    """What Berth's worker writes before it submits (activities/slurm_job_files.py): copy.json with the engine's
    argv per rank — the same `vllm serve` flags as on Berth's own nodes, the simulator as the engine — and the key."""
    job_dir = cluster.root / "shared" / copy_id
    engine = EngineSpec(served_model_name="m", max_model_len=4096)
    argvs = rank_argvs(berth_python("simulator"), copy_id, "wf", engine, nodes, 0, "/models/m")
    environment = engine_environment_for(engine, {"PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    write_job_dir(job_dir, job_description(argvs, copy_id, nodes, environment, "nodeaddr", 60), KEY)
    return job_dir


async def _submit(commands: SlurmCommands, cluster: SlurmCluster, copy_id: str, nodes: int = 2,
                  gpus: int = 2) -> tuple[int, Path]:
    job_dir = _job_dir(cluster, copy_id, nodes)
    job = CopyJob(copy_id=copy_id, nodes=nodes, gpus_per_node=gpus, job_dir=str(job_dir),
                  launcher=launcher_argv(sys.executable, slurm_rank.__file__))
    options, script = render(job, commands.settings)
    environment = {**cluster.environment, "PYTHONUNBUFFERED": "1"}
    return await commands.submit(options, script, environment), job_dir


async def _until(condition: Callable[[], object], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():  # type: ignore[misc]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_a_two_node_copy_serves_from_rank_0_and_ends_as_a_unit_when_a_rank_dies(
        commands: SlurmCommands, cluster: SlurmCluster) -> None:
    job_id, job_dir = await _submit(commands, cluster, "wf-a-c1")

    async def both_ranks_reported() -> bool:
        return all((job_dir / f"rank-{r}.json").exists() for r in (0, 1))
    await _until(both_ranks_reported)
    ranks = [json.loads((job_dir / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert {r["node"] for r in ranks} == {"n1", "n2"}  # one rank on each node, not two on the first
    leader = json.loads((job_dir / "leader.json").read_text())
    url = f"http://{leader['host']}:{leader['port']}"
    async with httpx.AsyncClient(timeout=5) as client:
        async def serving() -> bool:
            try:
                return (await client.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {KEY}"})).is_success
            except httpx.TransportError:
                return False
        await _until(serving)
        assert (await client.get(f"{url}/v1/models")).status_code == 401  # the copy answers only its key holder
    ranks_argv = [json.loads((job_dir / 'copy.json').read_text())['argv'][role] for role in ('leader', 'follower')]
    assert '--headless' in ranks_argv[1] and '--node-rank' in ranks_argv[1]  # pipeline parallel over both nodes
    (queued,) = await commands.queue([job_id])
    assert queued.running and queued.nodes == "n[1-2]" and queued.name == "berth-wf-a-c1"
    assert KEY not in (job_dir / "copy.json").read_text() and KEY not in cluster.command("scontrol", "show", "job",
                                                                                     str(job_id))

    os.kill(ranks[1]["pid"], signal.SIGKILL)  # the headless rank dies: the whole job must end

    async def ended() -> bool:
        return not any(j.running or j.pending for j in await commands.queue([job_id]))
    await _until(ended)
    finished = None

    async def recorded() -> bool:
        nonlocal finished
        finished = await commands.finished(job_id, "berth-wf-a-c1")
        return finished is not None
    await _until(recorded)
    assert finished is not None and finished.state == "FAILED" and finished.nodes == "n[1-2]"
    assert finished.exit_status != 0 or finished.signal != 0
    # slurmdbd's accounting: the batch step on the first node, and ONE srun step over both nodes — the ranks ran
    # as a step spanning the allocation, not a server on the first node of an N-node bill.
    steps = [line.split("|") for line in cluster.command(
        "sacct", "-j", str(job_id), "-P", "-n", "-o", "JobID,NNodes,NodeList").splitlines()]
    assert [s for s in steps if s[0] == f"{job_id}.0"] == [[f"{job_id}.0", "2", "n[1-2]"]]
    assert [s for s in steps if s[0] == f"{job_id}.batch"] == [[f"{job_id}.batch", "1", "n1"]]


async def test_a_request_slurm_can_never_run_is_refused_in_slurms_words(
        commands: SlurmCommands, cluster: SlurmCluster) -> None:
    with pytest.raises(SlurmRefused, match="Slurm refused the job: .*Requested node configuration is not available"):
        await _submit(commands, cluster, "wf-b-c1", nodes=1, gpus=8)
    with pytest.raises(SlurmRefused, match="Slurm refused the job"):
        await _submit(commands, cluster, "wf-b-c2", nodes=3, gpus=1)


async def test_on_a_busy_partition_the_copy_waits_with_slurms_reason_and_a_cancel_waits_until_it_is_gone(
        commands: SlurmCommands, cluster: SlurmCluster) -> None:
    blocker = await commands.submit(["--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=2", "--job-name=blocker",
                                     f"--chdir={cluster.root}", "--output=/dev/null"],
                                    "#!/bin/bash\nexec sleep 600\n", cluster.environment)
    job_id, _ = await _submit(commands, cluster, "wf-c-c1", nodes=1, gpus=1)

    async def pending_for_resources() -> bool:
        jobs = await commands.queue([job_id])
        return bool(jobs) and jobs[0].pending and jobs[0].reason in ("Resources", "Priority")
    await _until(pending_for_resources)
    assert [j.name for j in await commands.queue(name_prefix="berth-") if j.pending or j.running] == ["berth-wf-c-c1"]

    await commands.cancel(blocker)
    await commands.wait_gone(blocker, timeout_s=60)

    async def running() -> bool:
        return any(j.running for j in await commands.queue([job_id]))
    await _until(running)
    await commands.cancel(job_id)
    await commands.wait_gone(job_id, timeout_s=60)
    assert not any(j.running or j.pending for j in await commands.queue([job_id]))


async def test_slurms_nodes_and_their_gpus(commands: SlurmCommands) -> None:
    nodes = await commands.nodes()
    assert [(n.name, n.gpus, n.address) for n in nodes] == [("n1", 2, "127.0.0.1"), ("n2", 2, "127.0.0.1")]
