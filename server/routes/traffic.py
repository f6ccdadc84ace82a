"""Internal routes of a rollout's traffic (issue 17): the endpoint's split by revision, which the endpoint
proxy enforces, and a revision's health as the proxies saw its copies, which a canary is judged on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from berth.contracts import RevisionHealth, ServedRevision, TrafficSplit
from berth.contracts.base import INT32_MAX
from berth.errors import NotFoundError
from catalog.definition import WorkflowDefinition
from server.context import Context, ServerContext
from server.guards import Admin
from server.submission import pool_facts

router = APIRouter()


@router.put("/v1/internal/endpoints/{endpoint_id}/traffic", status_code=204)
async def set_traffic(endpoint_id: str, split: TrafficSplit, context: Context, _who: Admin) -> None:
    """Set (weights None: remove) the split; the proxies' next routes table carries it."""
    await run_in_threadpool(context.store.outcomes.set_traffic, endpoint_id, split.weights)


@router.get("/v1/internal/endpoints/{endpoint_id}/revision-health", response_model=RevisionHealth)
async def revision_health(endpoint_id: str, revision: Annotated[int, Query(ge=-INT32_MAX - 1, le=INT32_MAX)],
                          since: float, context: Context,
                          _who: Admin) -> RevisionHealth:
    return await run_in_threadpool(context.store.outcomes.health, endpoint_id, revision, since)


@router.put("/v1/internal/workflows/{workflow_id}/served-revision", status_code=204)
async def serve_revision(workflow_id: str, body: ServedRevision, context: Context, _who: Admin) -> None:
    """A rollout completed: the endpoint's facts become the new revision's (the autoscaler, the limits'
    context check and discovery read them)."""
    await run_in_threadpool(_serve, context, workflow_id, body.revision)


def _serve(context: ServerContext, workflow_id: str, revision: int) -> None:
    row = context.store.workflow(workflow_id)
    found = context.store.revisions.revision(row, revision)
    if found is None:
        raise NotFoundError(f"Workflow '{workflow_id}' has no revision {revision}.")
    context.store.revisions.serve(row, revision, pool_facts(WorkflowDefinition.model_validate(found.definition)))
