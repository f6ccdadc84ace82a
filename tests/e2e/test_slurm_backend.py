"""Berth on a Slurm cluster, end to end (issue 35): a stack whose placement backend is Slurm (BERTH_PLACEMENT_BACKEND)
over the session's one-machine cluster, its store on a real PostgreSQL. "GPT-OSS 20B" starts with the engine
simulator as the rank command, its copy one Slurm job that `squeue` shows; the endpoint answers a chat; a rank killed
ends the job and a new job serves in its place; a stop leaves `squeue` empty of the workflow's jobs; a copy Slurm
would never run is refused at submission; a control worker killed while the job runs takes it back."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stack.postgres import remove_instance, start_instance
from tests.slurm_cluster import SLURM_GROUP, SlurmCluster
from tests.support import RunningStack, free_port_base, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.postgres, pytest.mark.xdist_group(SLURM_GROUP),
              pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def slurm_stack(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """A node agent still runs the weights step and the fronts; every copy goes to Slurm. The store is a real
    PostgreSQL (stack/postgres.py): these scenarios run on it, as a site's control plane would."""
    tmp = Path(tmp_path_factory.mktemp("slurm-stack"))
    postgres = start_instance(tmp)
    settings = {"BERTH_PLACEMENT_BACKEND": "slurm", "BERTH_SLURM_CONF": str(slurm_cluster.conf),
                "BERTH_SLURM_PARTITION": "gpu", "BERTH_SLURM_SHARED_DIR": str(slurm_cluster.root / "shared"),
                "BERTH_SLURM_ENGINE": "simulator", "BERTH_REPLACE_BACKOFF_S": "0.5",
                "BERTH_SLURM_SELECTABLE_PARTITIONS": "gpu,long", "BERTH_SLURM_MAX_TIME_LIMIT": "3-00:00:00",
                # The weights on the shared filesystem, the state dir (its keys) not: as docs/slurm.md says.
                "BERTH_DATA_DIR": str(slurm_cluster.root / "shared" / "data"),
                "BERTH_DATABASE_URL": postgres.create_database()}
    try:
        stack = RunningStack(state_dir=tmp / "state", port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB",
                             extra_env=settings).start()
        try:
            yield stack
        finally:
            stack.stop()
    finally:
        remove_instance(postgres, tmp)


def _berth_jobs(cluster: SlurmCluster, workflow_id: str) -> list[list[str]]:
    out = cluster.command("squeue", "-h", "-o", "%i|%j|%T|%N")
    return [line.split("|") for line in out.splitlines() if f"berth-{workflow_id}." in line]


def _chat(url: str, token: str) -> str:
    response = httpx.post(url + "/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {token}"},
                          json={"model": "openai/gpt-oss-20b", "max_tokens": 8,
                                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def test_a_copy_is_a_slurm_job_that_serves_heals_as_a_new_job_and_stops(slurm_stack: RunningStack,
                                                                          slurm_cluster: SlurmCluster) -> None:
    stack = slurm_stack
    assert stack.env["BERTH_DATABASE_URL"].startswith("postgresql+psycopg://")  # the store on PostgreSQL
    workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false,ReplaceFailedCopies=2")
    info = stack.wait_phase(workflow_id, {"ready"}, timeout=120)
    (job,) = _berth_jobs(slurm_cluster, workflow_id)
    assert job[1] == f"berth-{workflow_id}.copy-0" and job[2] == "RUNNING"
    assert any(e["kind"] == "copy_placed" and "Slurm job" in e["message"] for e in info["events"])
    endpoint = stack.endpoint(workflow_id)
    token = stack.token_for(endpoint["id"])
    assert "Paris" in _chat(endpoint["url"], token)

    job_dir = slurm_cluster.root / "shared" / "jobs" / f"{workflow_id}.copy-0"
    argv = json.loads((job_dir / "copy.json").read_text())["argv"]["leader"]
    weights = Path(argv[argv.index("serve") + 1])  # `vllm serve MODEL_DIR`
    assert weights.is_relative_to(slurm_cluster.root / "shared" / "data" / "volumes"), argv
    rank0 = json.loads((job_dir / "rank-0.json").read_text())
    os.kill(rank0["pid"], signal.SIGKILL)  # the engine dies: the job ends, a new job takes its place

    def replaced() -> bool:
        described = stack.describe(workflow_id)
        return described["phase"] == "ready" and any(c["copy_id"].endswith(".copy-1") and c["status"] == "ready"
                                                     for c in described["copies"])
    wait_for(replaced, 120, "copy-1 serving as a new Slurm job")
    failed = next(e for e in stack.describe(workflow_id)["events"] if e["kind"] == "copy_failed")
    assert "Slurm job" in failed["message"] and "rank 0 on n1" in failed["message"]
    assert [j[1] for j in _berth_jobs(slurm_cluster, workflow_id) if j[2] == "RUNNING"] == [
        f"berth-{workflow_id}.copy-1"]
    assert "Paris" in _chat(endpoint["url"], token)

    listed = stack.cli("node", "list").stdout  # Slurm's nodes, read-only, beside the node agent Berth still runs
    assert "Slurm nodes" in listed and "n1" in listed and "n2" in listed and "gpu:2" in listed

    stack.cli("workflow", "stop", workflow_id)
    stack.wait_phase(workflow_id, {"stopped"}, timeout=120)
    assert not [j for j in _berth_jobs(slurm_cluster, workflow_id) if j[2] in ("PENDING", "RUNNING", "COMPLETING")]


def test_a_copy_slurm_would_never_run_is_refused_at_submission_in_slurms_words(slurm_stack: RunningStack) -> None:
    refused = slurm_stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values", "Proxy=false,GpusPerNode=8",
                              check=False)
    assert refused.returncode != 0
    assert ("Slurm would never run a copy of 1 node(s) with 8 GPU(s) each: allocation failure: Requested node "
            "configuration is not available") in refused.stderr + refused.stdout
    # The values' picks go into the same `sbatch --test-only`: the long partition's MaxTime is 2 days.
    too_long = slurm_stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values",
                               "Proxy=false,SlurmPartition=long,SlurmTimeLimit=2-12:00:00", check=False)
    assert too_long.returncode != 0 and "Requested time limit is invalid" in too_long.stderr + too_long.stdout
    beyond = slurm_stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values",
                             "Proxy=false,SlurmAccount=physics", check=False)
    assert beyond.returncode != 0
    assert "SlurmAccount=physics: this cluster lets no workflow pick an account" in beyond.stderr + beyond.stdout


def test_a_control_worker_killed_while_the_job_runs_takes_it_back_without_a_second_job(
        slurm_stack: RunningStack, slurm_cluster: SlurmCluster) -> None:
    stack = slurm_stack
    workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false,ReplaceFailedCopies=1")
    stack.wait_phase(workflow_id, {"ready"}, timeout=120)
    (job,) = _berth_jobs(slurm_cluster, workflow_id)
    worker = next(c for c in stack.info["children"] if c["name"] == "worker")
    os.killpg(worker["pid"], signal.SIGKILL)  # `berth up` starts it again; the copy's workflow goes on there

    # The restarted worker watches the same job: its end (the engine killed) is noticed and a new job replaces it.
    job_dir = slurm_cluster.root / "shared" / "jobs" / f"{workflow_id}.copy-0"
    os.kill(json.loads((job_dir / "rank-0.json").read_text())["pid"], signal.SIGKILL)

    def replaced() -> bool:
        copies = stack.describe(workflow_id).get("copies", [])  # none while no worker answers the query
        return any(c["copy_id"].endswith(".copy-1") and c["status"] == "ready" for c in copies)
    wait_for(replaced, 120, "copy-1 serving after the restarted worker saw copy-0's job end")
    names = [j[1] for j in _berth_jobs(slurm_cluster, workflow_id) if j[2] in ("PENDING", "RUNNING")]
    assert names == [f"berth-{workflow_id}.copy-1"] and job[1] == f"berth-{workflow_id}.copy-0"
    submitted = slurm_cluster.command("sacct", "-c", "-n", "-P", "-o", "JobName").split()
    assert submitted.count(f"berth-{workflow_id}.copy-0") == 1  # copy-0 was submitted once, never twice
    stack.cli("workflow", "stop", workflow_id)
    stack.wait_phase(workflow_id, {"stopped"}, timeout=120)
