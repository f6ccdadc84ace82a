"""ModelJobWorkflow on a local Temporal dev server, its activities faked (tests/workflows/fake_models.py):
the steps it writes to the registry, the refusals that fail it, and a pool that waits for its model — the
job signals it, and the pool serves the digest's directory or fails with the job's message."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowFailureError

from berth.contracts import ModelState
from berth.settings import CONTROL_TASK_QUEUE
from tests.workflows.fake_cluster import FakeCluster, FakeNode
from tests.workflows.fake_models import DIGEST, FakeModels
from tests.workflows.harness import Harness, event_kinds, eventually, node_ids, pool_definition
from workflows.model_payloads import ModelJobInput, ModelUpdate
from workflows.payloads import Phase

MATERIALIZE_STEPS = [ModelState.RESOLVING, ModelState.DOWNLOADING, ModelState.VERIFYING, ModelState.SCANNING,
                     ModelState.READY]


def cluster(count: int = 1) -> FakeCluster:
    return FakeCluster(nodes=[FakeNode(node_id) for node_id in node_ids(count)])


async def run_job(harness: Harness, models: FakeModels, kind: str = "materialize") -> ModelUpdate:
    models.job_id = uuid.uuid4().hex[:10]
    handle = await harness.client.start_workflow(
        "ModelJobWorkflow", ModelJobInput(model_id=models.spec.model_id, job_id=models.job_id, kind=kind),
        id=f"model-job-{models.job_id}", task_queue=CONTROL_TASK_QUEUE, result_type=ModelUpdate)
    result: ModelUpdate = await handle.result()
    return result


async def test_a_job_walks_every_step_and_ends_ready_with_the_digest(harness: Harness) -> None:
    nodes = cluster()
    models = FakeModels(harness.client, node_ids(1)[0])
    models.download_gate.set()
    async with harness.running(nodes, models):
        result = await run_job(harness, models)
    assert result.state is ModelState.READY and result.digest == DIGEST
    assert result.model_dir == f"/cache/sha256/{DIGEST}"
    assert [step.state for step in models.steps] == MATERIALIZE_STEPS
    ready = models.steps[-1]
    assert (ready.digest, ready.files, ready.safetensors_files, ready.verified) == (DIGEST, 3, 1, True)
    downloading = models.steps[1]
    assert downloading.commit == "c0" * 20 and downloading.size_bytes == 1000
    # The scan runs on the node that staged the bytes.
    assert len(models.called("check_model")) == 1


async def test_require_checksum_fails_an_unverified_download(harness: Harness) -> None:
    nodes = cluster()
    models = FakeModels(harness.client, node_ids(1)[0], verified=False)
    models.spec = models.spec.model_copy(update={"require_checksum": True})
    models.download_gate.set()
    async with harness.running(nodes, models):
        result = await run_job(harness, models)
    assert result.state is ModelState.FAILED
    assert "requires checksums" in (result.message or "") and "config.json" in (result.message or "")
    assert models.called("check_model") == []  # nothing unverified reaches the cache


async def test_a_scan_refusal_fails_the_job_once_with_its_message(harness: Harness) -> None:
    nodes = cluster()
    refusal = "model smol: refused pickle files: pytorch_model.pt"
    models = FakeModels(harness.client, node_ids(1)[0], check_error=refusal)
    models.download_gate.set()
    async with harness.running(nodes, models):
        result = await run_job(harness, models)
    assert result.state is ModelState.FAILED and result.message == refusal
    assert len(models.called("check_model")) == 1  # final: never retried
    assert models.steps[-1].state is ModelState.FAILED and models.steps[-1].message == refusal


async def test_verify_names_the_changed_file(harness: Harness) -> None:
    nodes = cluster()
    models = FakeModels(harness.client, node_ids(1)[0])
    models.spec = models.spec.model_copy(update={"digest": DIGEST})
    async with harness.running(nodes, models):
        result = await run_job(harness, models, kind="verify")
    assert result.state is ModelState.FAILED
    assert "model.safetensors: SHA-256 differs" in (result.message or "")
    assert [s.state for s in models.steps] == [ModelState.VERIFYING, ModelState.FAILED]


async def test_a_pool_waits_for_its_model_then_serves_the_digest(harness: Harness) -> None:
    nodes = cluster(2)
    models = FakeModels(harness.client, node_ids(1)[0])
    definition = pool_definition().model_copy(update={"model_ref": "model://smol"})
    async with harness.running(nodes, models):
        first = await harness.start(definition)
        second = await harness.start(definition)
        await harness.wait_status(first, lambda s: "waiting_for_model" in event_kinds(s), "the wait's event")
        await harness.wait_status(second, lambda s: "waiting_for_model" in event_kinds(s), "the second's")
        # Both pools joined one job: one download.
        await eventually(lambda: len(models.called("download_model")) == 1, "the download to start")
        assert len({u.workflow_id for u in models.called("use_model")}) == 2
        models.download_gate.set()
        for handle in (first, second):
            status = await harness.wait_status(handle, lambda s: s.phase is Phase.READY, "the pool to serve")
            assert status.weights is not None and status.weights.digest == DIGEST
            assert status.weights.model == "model://smol" and status.weights.model_dir.endswith(DIGEST)
            assert "model_ready" in event_kinds(status)
        assert len(models.called("download_model")) == 1
        assert nodes.called("reserve_placement")[0].prefer_model == DIGEST
        await harness.stop(first)
        await harness.stop(second)
    assert sorted(models.called("release_models")) == sorted([first.id, second.id])


async def test_a_pool_for_a_failed_model_fails_with_the_jobs_message(harness: Harness) -> None:
    nodes = cluster()
    refusal = "model smol: signature does not match digest abababababab…"
    models = FakeModels(harness.client, node_ids(1)[0], check_error=refusal)
    models.download_gate.set()
    definition = pool_definition().model_copy(update={"model_ref": "model://smol"})
    async with harness.running(nodes, models):
        handle = await harness.start(definition)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        status = await harness.status(handle)
    assert status.phase is Phase.FAILED and refusal in (status.last_error or "")
    assert nodes.called("reserve_placement") == []
