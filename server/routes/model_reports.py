"""Internal model routes (`/v1/internal/models/...`), for Berth's own services (administrators' tokens):
what a model job reads and reports (its spec, its steps, its progress; a stale job's reports are ignored),
and what a workflow asks before serving a model (`use`: the record, its directory when Ready, else the
job started or joined) and when it ends (`release`)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import (
    ModelJobSpec,
    ModelProgressReport,
    ModelRelease,
    ModelReleased,
    ModelState,
    ModelStateReport,
    ModelUse,
    ModelUseAnswer,
)
from berth.settings import StateLayout
from server.context import Context
from server.guards import Admin
from server.routes.models import registry, start_or_join
from server.store.model_usage import ModelUsage

router = APIRouter()


@router.get("/v1/internal/models/{model_id}")
async def model_job_spec(model_id: str, context: Context, _who: Admin) -> ModelJobSpec:
    return await run_in_threadpool(ModelUsage(context.store).job_spec, model_id)


@router.put("/v1/internal/models/{model_id}/state", status_code=204)
async def report_model_state(model_id: str, report: ModelStateReport, context: Context, _who: Admin) -> None:
    # A stale job's report changes nothing; it is not an error (that job may still be winding down).
    await run_in_threadpool(ModelUsage(context.store).apply_state, model_id, report)


@router.put("/v1/internal/models/{model_id}/progress", status_code=204)
async def report_model_progress(model_id: str, report: ModelProgressReport, context: Context,
                                _who: Admin) -> None:
    await run_in_threadpool(ModelUsage(context.store).apply_progress, model_id, report)


@router.post("/v1/internal/models/use")
async def use_model(body: ModelUse, context: Context, _who: Admin) -> ModelUseAnswer:
    """The model a workflow is about to serve, recorded as in use: Ready → its directory; Failed → the
    record (its message is why the workflow fails); otherwise its job, started or joined."""
    owner = await run_in_threadpool(context.store.identity, body.user)
    usage = ModelUsage(context.store, registry(context))
    model = await run_in_threadpool(usage.use, owner, body.ref, body.workflow_id)
    if model.state is ModelState.READY and model.digest:
        # A pre-staged model is served where it lies; a downloaded one from the cache, by digest.
        directory = model.path or str(StateLayout(context.state.root).models / "sha256" / model.digest)
        return ModelUseAnswer(model=model, model_dir=directory, job_id=model.job_id)
    if model.state is ModelState.FAILED:
        return ModelUseAnswer(model=model, job_id=model.job_id)
    model, _joined = await start_or_join(context, model.id, "materialize", waiter=body.workflow_id)
    return ModelUseAnswer(model=model, job_id=model.job_id)


@router.post("/v1/internal/models/release")
async def release_models(body: ModelRelease, context: Context, _who: Admin) -> ModelReleased:
    released = await run_in_threadpool(ModelUsage(context.store).release, body.workflow_id)
    return ModelReleased(released=released)
