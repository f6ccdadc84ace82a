"""Internal routes of a rollout's traffic (issue 17): the endpoint's split by revision, which the endpoint
proxy enforces, and a revision's health as the proxies saw its copies, which a canary is judged on."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import RevisionHealth, TrafficSplit
from server.context import Context
from server.guards import Admin

router = APIRouter()


@router.put("/v1/internal/endpoints/{endpoint_id}/traffic", status_code=204)
async def set_traffic(endpoint_id: str, split: TrafficSplit, context: Context, _who: Admin) -> None:
    """Set (weights None: remove) the split; the proxies' next routes table carries it."""
    await run_in_threadpool(context.store.outcomes.set_traffic, endpoint_id, split.weights)


@router.get("/v1/internal/endpoints/{endpoint_id}/revision-health", response_model=RevisionHealth)
async def revision_health(endpoint_id: str, revision: int, since: float, context: Context,
                          _who: Admin) -> RevisionHealth:
    return await run_in_threadpool(context.store.outcomes.health, endpoint_id, revision, since)
