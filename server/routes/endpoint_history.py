"""Endpoint history route: an endpoint's recent whole minutes (requests, failures, tokens, p50/p99 latency, ready
copies), for the console's chart on the endpoint's page. Whoever may see the endpoint may read it; to anyone else it
does not exist (404), as for its detail."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from berth.contracts import EndpointHistory
from berth.contracts.endpoint_history import DEFAULT_WINDOW_S, MAX_WINDOW_S, MIN_WINDOW_S, STEP_S
from server.context import Context
from server.guards import VisibleEndpoint

router = APIRouter()
Window = Annotated[int, Query(ge=MIN_WINDOW_S, le=MAX_WINDOW_S, multiple_of=STEP_S,
                              description="seconds back from the current minute, in whole minutes")]


@router.get("/v1/endpoints/{endpoint_id}/history")
async def endpoint_history(endpoint: VisibleEndpoint, context: Context,
                           window: Window = DEFAULT_WINDOW_S) -> EndpointHistory:
    """One point per whole minute of the window, oldest first, as the endpoint proxies counted its requests."""
    return await run_in_threadpool(context.store.history.history, endpoint.id, window)
