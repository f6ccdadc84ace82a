"""Model jobs from the control plane's side: start (or join) the Temporal workflow of a job the registry
recorded, and run one cache eviction. The routes only record and start; the work runs in the workflows.

A job's workflow id is `model-job-<job id>`: the registry gives a model one job id while a job works, so
a second materialize (or a workflow that needs the model) joins the running one; a finished job is never
run again under its id (its outcome is in the registry)."""

from __future__ import annotations

from datetime import timedelta

from starlette.concurrency import run_in_threadpool
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from berth.contracts import EvictRequest, EvictResult, ModelRecord
from berth.settings import CONTROL_TASK_QUEUE
from server.context import ServerContext
from server.store.model_usage import ModelUsage
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


async def evict_model_cache(context: ServerContext, request: EvictRequest) -> EvictResult:
    """Run one eviction on a node (the cache lives on the nodes) and mark the models whose bytes went back
    to Registered. Kept: every digest a running workflow serves; uses left by a workflow that ended
    without letting go (terminated) are dropped first, so they keep nothing."""
    usage = ModelUsage(context.store)
    await _drop_ended_uses(context, usage)
    entries = await run_in_threadpool(usage.cached_digests)
    budget = request.budget_bytes if request.budget_bytes is not None else context.settings.model_cache_bytes
    job = EvictInput(budget_bytes=budget, referenced=[e.digest for e in entries if e.referenced],
                     names={e.digest: e.models for e in entries},
                     last_used={e.digest: e.last_used_at for e in entries if e.last_used_at is not None})
    client = await context.temporal()
    result: EvictResult = await client.execute_workflow(
        "ModelCacheWorkflow", job, id="model-cache-evict", task_queue=CONTROL_TASK_QUEUE, result_type=EvictResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, execution_timeout=EVICT_TIMEOUT)
    for evicted in result.evicted:
        await run_in_threadpool(usage.mark_evicted, evicted.digest)
    return result


async def _drop_ended_uses(context: ServerContext, usage: ModelUsage) -> None:
    client = await context.temporal()
    for workflow_id in await run_in_threadpool(usage.using_workflows):
        try:
            description = await client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
            running = False
        else:
            running = description.status is WorkflowExecutionStatus.RUNNING
        if not running:
            await run_in_threadpool(usage.release, workflow_id)
