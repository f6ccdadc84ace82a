"""Model jobs from the control plane's side: start (or join) the Temporal workflow of a job the registry
recorded, and run one cache eviction. The routes only record and start; the work runs in the workflows.

A job's workflow id is `model-job-<job id>`: the registry gives a model one job id while a job works, so
a second materialize (or a workflow that needs the model) joins the running one; a finished job is never
run again under its id (its outcome is in the registry)."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from berth.contracts import EvictResult, ModelRecord
from berth.settings import CONTROL_TASK_QUEUE
from server.context import ServerContext
from workflows.model_payloads import EvictInput, ModelJobInput

EVICT_TIMEOUT = timedelta(minutes=10)


def job_workflow_id(job_id: str) -> str:
    return f"model-job-{job_id}"


async def start_model_job(context: ServerContext, record: ModelRecord, kind: str, job_id: str,
                          waiter: str | None = None) -> None:
    """Start the job's workflow, or join it when it runs; `waiter` (a serving workflow) is told each step."""
    client = await context.temporal()
    job = ModelJobInput(model_id=record.id, job_id=job_id, kind="verify" if kind == "verify" else "materialize")
    try:
        if waiter:
            # Signal-with-start: one atomic call whether the job is new or running.
            await client.start_workflow("ModelJobWorkflow", job, id=job_workflow_id(job_id),
                                        task_queue=CONTROL_TASK_QUEUE, start_signal="add_waiter",
                                        start_signal_args=[waiter],
                                        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
        else:
            await client.start_workflow("ModelJobWorkflow", job, id=job_workflow_id(job_id),
                                        task_queue=CONTROL_TASK_QUEUE,
                                        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                                        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    except WorkflowAlreadyStartedError:
        pass  # it finished meanwhile: the registry holds its outcome, which the caller reads again


async def evict_model_cache(context: ServerContext, budget_bytes: int, referenced: list[str],
                            names: dict[str, list[str]]) -> EvictResult:
    """Run one eviction on a node and answer what it removed (the cache lives on the nodes)."""
    client = await context.temporal()
    result: EvictResult = await client.execute_workflow(
        "ModelCacheWorkflow", EvictInput(budget_bytes=budget_bytes, referenced=referenced, names=names),
        id="model-cache-evict", task_queue=CONTROL_TASK_QUEUE, result_type=EvictResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, execution_timeout=EVICT_TIMEOUT)
    return result
