"""Endpoint routes: list and show the endpoints in the caller's scope, wake a pool at zero, and the facts a
client needs to call one (its tokens: server/routes/endpoint_tokens.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from temporalio.service import RPCError

from berth.contracts import (
    EndpointClientFacts,
    EndpointView,
    WakeRequest,
    WakeResult,
)
from berth.errors import NotFoundError
from server import opencode as opencode_checks
from server.access import in_scope
from server.context import Context
from server.guards import Caller, ReachableEndpoint, VisibleEndpoint
from server.pool_query import pool_status
from server.refusals import refusals
from server.views import endpoint_url, endpoint_view
from workflows.payloads import PoolStatus
from workflows.pool_workflow import PoolWorkflow

router = APIRouter(responses=refusals(503))  # Temporal unreachable


@router.get("/v1/endpoints", response_model=list[EndpointView], response_model_exclude_unset=True)
async def list_endpoints(context: Context, who: Caller) -> list[dict[str, Any]]:
    endpoints = await run_in_threadpool(context.store.endpoints)
    replicas = await run_in_threadpool(context.store.replicas)
    return [endpoint_view(context, endpoint, replicas) for endpoint in endpoints
            if who.admin or in_scope(endpoint, who)]


@router.get("/v1/endpoints/{endpoint_id}", response_model=EndpointView, response_model_exclude_unset=True)
async def endpoint_detail(endpoint_id: str, endpoint: VisibleEndpoint, context: Context) -> dict[str, Any]:
    replicas = await run_in_threadpool(context.store.replicas, endpoint_id)
    return endpoint_view(context, endpoint, replicas)


@router.post("/v1/endpoints/{endpoint_id}/wake", response_model=WakeResult)
async def wake_endpoint(endpoint_id: str, body: WakeRequest, endpoint: VisibleEndpoint, who: Caller,
                        context: Context) -> dict[str, Any]:
    """A request reached a pool with no copy: ask its workflow for one (anyone in scope may)."""
    # Demand: keeps the woken pool from idling back to zero.
    await run_in_threadpool(context.store.load.add_front_door, endpoint_id, 1)
    client = await context.temporal()
    handle = client.get_workflow_handle(endpoint.workflow_id)
    try:
        # Whether the pool was asleep tells the caller to hold the request (a copy is coming) or not
        # (copies are already wanted: starting, or waiting for capacity).
        status: PoolStatus = await pool_status(handle, rpc_timeout=timedelta(seconds=5))
        if status.desired_copies == 0:  # else a no-op for the workflow: spare its history the signal
            await handle.signal(PoolWorkflow.wake, body.reason or f"a request from {who.user}")
    except RPCError as error:
        raise NotFoundError(
            f"Workflow '{endpoint.workflow_id}' is not running ({error.message}).") from None
    return {"endpoint_id": endpoint_id, "workflow_id": endpoint.workflow_id,
            "woken": status.desired_copies == 0, "phase": status.phase.value}


@router.get("/v1/endpoints/{endpoint_id}/client-config", response_model=EndpointClientFacts)
async def endpoint_client_config(endpoint_id: str, endpoint: ReachableEndpoint, context: Context) -> dict[str, Any]:
    """What a client (OpenCode, an SDK) needs: URL, the model id /v1/models lists, its context."""
    return await run_in_threadpool(opencode_checks.client_facts, context.store, endpoint,
                                   endpoint_url(context, endpoint_id))
