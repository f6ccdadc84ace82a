"""Model registry routes: register a model, list and describe what the caller may see, remove one (its
owner or an administrator, never while a running workflow serves it), record a materialize or verify job
(or join the one running) and hand it to the model jobs, list the jobs, and evict the managed cache
(administrators). The jobs themselves run outside any request (`ServerContext.model_jobs`)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import (
    EvictRequest,
    EvictResult,
    JobStarted,
    ModelCreate,
    ModelJobRecord,
    ModelRecord,
    ModelState,
    ModelStateReport,
)
from berth.errors import UnavailableError
from server.context import Context, ServerContext
from server.guards import Admin, Caller
from server.refusals import refusals
from server.store.model_registry import ModelRegistry
from server.store.model_usage import ModelUsage

router = APIRouter(responses=refusals(409, 503))  # a model name taken or in use; no model job runner


def registry(context: ServerContext) -> ModelRegistry:
    return ModelRegistry(context.store, context.settings.model_dirs)


async def start_or_join(context: ServerContext, model_id: str, kind: str,
                        waiter: str | None = None) -> tuple[ModelRecord, bool]:
    """Record a `kind` job for the model (or join the running one) and hand it to the model jobs; a job
    that cannot be started is recorded Failed with why, so the next request records a fresh one."""
    starter = context.model_jobs
    if starter is None:
        raise UnavailableError("Model jobs are not running on this control plane (no model job starter); "
                               "is the control worker up (`berth status`)?")
    usage = ModelUsage(context.store, registry(context))
    record, joined = await run_in_threadpool(usage.record_job, model_id, kind)
    assert record.job_id is not None  # record_job set or found one
    try:
        await starter(context, record, kind, record.job_id, waiter)
    except Exception as error:
        report = ModelStateReport.model_validate({"job_id": record.job_id, "state": ModelState.FAILED,
                                                  "message": f"The model job could not be started: {error}"[:2000]})
        await run_in_threadpool(usage.apply_state, model_id, report)
        raise
    return record, joined


@router.post("/v1/models", status_code=201)
async def add_model(body: ModelCreate, context: Context, who: Caller) -> ModelRecord:
    """Register a model in your scope (names are unique per scope); no bytes move until a job runs."""
    return await run_in_threadpool(registry(context).add, who, body)


@router.get("/v1/models")
async def list_models(context: Context, who: Caller) -> list[ModelRecord]:
    """The models you may use: yours, your groups', your organization's (an administrator: all)."""
    return await run_in_threadpool(registry(context).list, who)


@router.get("/v1/model-jobs")
async def list_model_jobs(context: Context, who: Caller) -> list[ModelJobRecord]:
    """The current (or last) job of each model you may see, newest first."""
    return await run_in_threadpool(ModelUsage(context.store).jobs, who)


# Before /v1/models/{name}: a fixed path is never taken for a model's name.
@router.post("/v1/models/cache/evict")
async def evict_model_cache(body: EvictRequest, context: Context, _who: Admin) -> EvictResult:
    """Delete the oldest unreferenced digests from the managed cache until it is under the budget."""
    if context.model_cache_evict is None:
        raise UnavailableError("The model cache is not managed by this control plane (no evictor).")
    return await context.model_cache_evict(context, body)


@router.get("/v1/models/{name}")
async def describe_model(name: str, context: Context, who: Caller) -> ModelRecord:
    return await run_in_threadpool(registry(context).find, who, name)


@router.get("/v1/models/{name}/status")
async def model_status(name: str, context: Context, who: Caller) -> ModelRecord:
    """The record with its job's state, retries, message and progress (what `status --watch` follows)."""
    return await run_in_threadpool(registry(context).find, who, name)


@router.delete("/v1/models/{name}")
async def remove_model(name: str, context: Context, who: Caller) -> ModelRecord:
    """Remove the registration (the cache's bytes go with the next eviction); the removed record answers."""
    return await run_in_threadpool(registry(context).remove, who, name)


async def _job(name: str, kind: str, context: ServerContext, who: Caller) -> JobStarted:
    model = await run_in_threadpool(registry(context).find, who, name)
    record, joined = await start_or_join(context, model.id, kind)
    return JobStarted(model=record.name, job_id=record.job_id or "", state=record.state, joined=joined)


@router.post("/v1/models/{name}/materialize")
async def materialize_model(name: str, context: Context, who: Caller) -> JobStarted:
    """Record a materialize job (download, verify, scan) or join the running one; it runs on its own."""
    return await _job(name, "materialize", context, who)


@router.post("/v1/models/{name}/verify")
async def verify_model(name: str, context: Context, who: Caller) -> JobStarted:
    """Record a job that recomputes the digest of the cached bytes and scans them again."""
    return await _job(name, "verify", context, who)
