"""Workflow routes: start one from a catalog entry, list, describe, read its definition, stop, scale,
and read its jobs' logs — each behind the guard its reader needs (server/guards.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from opentelemetry import trace
from starlette.concurrency import run_in_threadpool
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from berth.contracts import (
    EventKind,
    WorkflowDefinitionView,
    WorkflowDescription,
    WorkflowLogs,
    WorkflowScaled,
    WorkflowScaleRequest,
    WorkflowStarted,
    WorkflowStopped,
    WorkflowSummary,
)
from berth.errors import NotFoundError, UnavailableError, UserInputError
from berth.kinds import facts
from berth.processes import tail
from catalog.definition import WorkflowDefinition
from server.access import WorkflowAccess
from server.context import Context, ServerContext
from server.events import EventDraft, record
from server.guards import Caller, ReadableWorkflow, owned_workflow
from server.model_refs import register_first_use
from server.policy_check import check_scale, check_start, quotas_set
from server.pool_query import pool_status
from server.pool_start import start_pool
from server.refusals import refusals
from server.store.tables import EndpointRow
from server.submission import StartRequest, new_rows, prepare, with_generated_keys
from server.views import endpoint_url, endpoint_view, scaling_of
from workflows.activity_stubs import activity_name, download_weights
from workflows.payloads import PoolStatus, ScaleRequest, StopRequest
from workflows.pool_workflow import PoolWorkflow

router = APIRouter(responses=refusals(409, 503))  # a workflow name taken; Temporal unreachable
QUERY_TIMEOUT = timedelta(seconds=5)
# How a closed PoolWorkflow's Temporal status reads as its phase: it completes only once stopped.
_CLOSED_PHASES = {WorkflowExecutionStatus.COMPLETED: "stopped", WorkflowExecutionStatus.FAILED: "failed"}


DefinitionReader = Annotated[
    WorkflowAccess, Depends(owned_workflow("read its definition (it holds its keys and passwords)"))]
Stopper = Annotated[WorkflowAccess, Depends(owned_workflow("stop it"))]
Scaler = Annotated[WorkflowAccess, Depends(owned_workflow("scale it"))]


@router.post("/v1/workflows", status_code=201, response_model=WorkflowStarted)
async def start_workflow(body: StartRequest, context: Context, who: Caller) -> dict[str, Any]:
    # Checking and rendering a submission is CPU work and reads the store: off the event loop, so
    # one large submission cannot hold every other request (issue 11 item 3); two at a time, one per user
    # (server/submission_slots.py).
    async with context.submissions.slot(who.user):
        entry, definition = await run_in_threadpool(prepare, context, body, who)
        await run_in_threadpool(check_start, context, who, definition)
    definition = with_generated_keys(definition)
    row, endpoint = new_rows(entry, definition, who, body.name)
    workflow_id, endpoint_id = row.id, endpoint.id
    await run_in_threadpool(context.store.add_workflow, row, definition.model_dump(mode="json"), endpoint)
    await run_in_threadpool(context.store.revisions.add_revision, workflow_id, 1, definition.model_dump(mode="json"),
                            body.values, who.user)
    await run_in_threadpool(register_first_use, context, definition, who, workflow_id)
    try:
        client = await context.temporal()
        # The trace's root (BERTH_OTEL_ENDPOINT): placement, rank start and ready chain under it.
        with trace.get_tracer("berth.server").start_as_current_span(
                "berth.catalog.start", kind=trace.SpanKind.SERVER,
                attributes={"berth.workflow": workflow_id, "berth.endpoint": endpoint_id}):
            await start_pool(context, client, workflow_id, endpoint_id, definition, who)
    except (RPCError, UnavailableError) as error:
        await run_in_threadpool(context.store.remove_endpoint, endpoint_id)
        raise UnavailableError(f"Temporal refused to start the workflow ({error}); nothing was created.") from None
    await run_in_threadpool(record, context.store, EventDraft(
        EventKind.WORKFLOW_STARTED, f"{who.user} started {workflow_id} from {entry.name}", workflow_id=workflow_id,
        actor=who.user, details={"entry": entry.name}))
    return {"id": workflow_id, "endpoint_id": endpoint_id, "url": endpoint_url(context, endpoint_id)}


@router.get("/v1/workflows", response_model=list[WorkflowSummary])
async def list_workflows(context: Context, who: Caller) -> list[dict[str, Any]]:
    rows = await run_in_threadpool(context.store.workflows, None if who.admin else who.user)
    client = await context.temporal()
    # Bounded so that a long listing does not open a request to Temporal per workflow at once.
    limit = asyncio.Semaphore(16)
    states = await asyncio.gather(*(_listed_state(client, row.id, limit) for row in rows))
    return [{"id": row.id, "entry": row.entry, "owner": row.owner, "created_at": row.created_at,
             "status": status, "phase": phase, "endpoint_id": row.endpoint_id}
            for row, (status, phase) in zip(rows, states, strict=True)]


@router.get("/v1/workflows/{workflow_id}", response_model=WorkflowDescription, response_model_exclude_unset=True)
async def describe_workflow(workflow_id: str, access: ReadableWorkflow, context: Context) -> dict[str, Any]:
    row = access.row
    client = await context.temporal()
    handle = client.get_workflow_handle(workflow_id)
    result: dict[str, Any] = {"id": row.id, "entry": row.entry, "owner": row.owner, "created_at": row.created_at,
                              "endpoint": {"id": row.endpoint_id, "url": endpoint_url(context, row.endpoint_id)}}
    with contextlib.suppress(NotFoundError):
        endpoint = await run_in_threadpool(context.store.endpoint, row.endpoint_id)
        result["endpoint"].update(_endpoint_notes(context, endpoint))
    if (scaling := scaling_of(access.endpoint)) is not None:
        result["scaling"] = scaling.model_dump(mode="json")
    try:
        description = await handle.describe()
        result["status"] = _temporal_status(description.status)
        for pending in description.raw_description.pending_activities:
            if pending.activity_type.name == activity_name(download_weights) and pending.heartbeat_details.payloads:
                details = await client.data_converter.decode(pending.heartbeat_details.payloads)
                result["download"] = details[0] if details else None
    except RPCError as error:
        raise NotFoundError(f"Temporal has no workflow '{workflow_id}' ({error.message}).") from None
    try:
        status: PoolStatus = await pool_status(handle, rpc_timeout=QUERY_TIMEOUT)
        result.update(status.model_dump(mode="json"))
    except (RPCError, Exception) as error:  # noqa: BLE001 — a query can fail many ways; say so
        result["phase"] = "unknown"
        result["note"] = f"could not query the workflow ({type(error).__name__}); is the control worker up?"
    return access.redact_status(result)


def _endpoint_notes(context: ServerContext, endpoint: EndpointRow) -> dict[str, Any]:
    """What `describe` says of the workflow's endpoint beyond its URL: discovery, and when its borrowed
    tokens lapse."""
    notes = endpoint_view(context, endpoint, [])["annotations"]
    shown: dict[str, Any] = {"discoverable": notes["discoverable"]}
    # OpenCode's endpoint is its own HTTP API, not an OpenAI one: clients print it without /v1.
    shown["openai_compatible"] = facts(endpoint.service).openai_compatible
    if notes.get("not_discoverable_reason"):
        shown["note"] = "not discoverable by a gateway: " + notes["not_discoverable_reason"]
    lapses = (endpoint.annotations or {}).get("token_lapses_at")
    if lapses:
        shown["token_lapses_at"] = lapses
        shown["note"] = (
            "the Berth token this service uses for its model endpoints lapses at "
            + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(lapses)) + "; restart the workflow to renew it")
    return shown


@router.get("/v1/workflows/{workflow_id}/definition", response_model=WorkflowDefinitionView)
async def workflow_definition(workflow_id: str, context: Context, access: DefinitionReader) -> dict[str, Any]:
    row = access.row
    return {"id": row.id, "entry": row.entry,
            "definition": await run_in_threadpool(context.store.workflow_definition, row)}


@router.post("/v1/workflows/{workflow_id}/stop", response_model=WorkflowStopped)
async def stop_workflow(workflow_id: str, context: Context,
                        access: Stopper) -> dict[str, Any]:
    client = await context.temporal()
    try:
        await client.get_workflow_handle(workflow_id).signal(PoolWorkflow.stop,
                                                             StopRequest(by=access.who.user))
    except RPCError as error:
        raise NotFoundError(f"Workflow '{workflow_id}' is not running ({error.message}).") from None
    await run_in_threadpool(context.store.mark_stop_requested, workflow_id)
    await run_in_threadpool(record, context.store, EventDraft(
        EventKind.WORKFLOW_STOPPED, f"{access.who.user} asked {workflow_id} to stop", workflow_id=workflow_id,
        actor=access.who.user))
    return {"id": workflow_id, "stop_requested": True}


@router.post("/v1/workflows/{workflow_id}/scale", response_model=WorkflowScaled)
async def scale_workflow(workflow_id: str, body: WorkflowScaleRequest, context: Context,
                         access: Scaler) -> dict[str, Any]:
    who = access.who
    if body.copies < 0:
        raise UserInputError(f"--replicas must be 0 or more, not {body.copies}.")
    client = await context.temporal()
    handle = client.get_workflow_handle(workflow_id)
    try:
        await _check_scale_quota(context, handle, access, body.copies)
        result = await handle.execute_update(
            PoolWorkflow.scale, ScaleRequest(replicas=body.copies, reason=f"by {who.user}"),
        )
    except WorkflowUpdateFailedError as error:
        cause = error.cause
        raise UserInputError(getattr(cause, "message", None) or str(cause or error)) from None
    except RPCError as error:
        raise NotFoundError(f"Workflow '{workflow_id}' is not running ({error.message}).") from None
    await run_in_threadpool(record, context.store, EventDraft(
        EventKind.WORKFLOW_SCALED, f"{who.user} scaled {workflow_id} to {body.copies} copies", workflow_id=workflow_id,
        actor=who.user, details={"copies": body.copies}))
    return {"id": workflow_id, **result.model_dump(mode="json")}


async def _check_scale_quota(context: ServerContext, handle: WorkflowHandle[Any, Any], access: WorkflowAccess,
                             copies: int) -> None:
    """Refuse a scale-out a quota would not allow (docs/policies.md), asking the pool its size only when a quota
    is set."""
    if copies == 0 or not await run_in_threadpool(quotas_set, context):
        return
    status: PoolStatus = await pool_status(handle, rpc_timeout=QUERY_TIMEOUT)
    definition = WorkflowDefinition.model_validate(
        await run_in_threadpool(context.store.workflow_definition, access.row))
    await run_in_threadpool(check_scale, context, access.row.id, definition, status.desired_copies, copies)


@router.get("/v1/workflows/{workflow_id}/logs", response_model=WorkflowLogs, response_model_exclude_unset=True)
async def workflow_logs(workflow_id: str, access: ReadableWorkflow, context: Context,
                        job: str | None = None, lines: int = 200) -> dict[str, Any]:
    # Walking the log tree and reading a tail are file-system work: off the event loop.
    return await run_in_threadpool(_read_logs, context.state.workflow_logs(workflow_id), workflow_id, access,
                                   job, lines)


def _read_logs(root: Path, workflow_id: str, access: WorkflowAccess, job: str | None, lines: int) -> dict[str, Any]:
    files = sorted(root.rglob("*.log"), key=lambda p: p.stat().st_mtime) if root.exists() else []
    jobs = sorted({p.stem for p in files if access.may_read_job(p.stem)})
    if job is None:
        return {"jobs": jobs}
    access.require_job(job)
    matching = [p for p in files if p.stem == job]
    if not matching:
        known = ", ".join(jobs) or "none yet"
        raise NotFoundError(f"Workflow '{workflow_id}' has no job '{job}'. Its jobs: {known}.")
    latest = matching[-1]
    return {"job": job, "copy": latest.parent.name, "text": tail(latest, max(1, min(lines, 10_000)), 4_000_000)}


def _temporal_status(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status is not None else "unknown"


async def _listed_state(client: Client, workflow_id: str, limit: asyncio.Semaphore) -> tuple[str, str]:
    """(Temporal status, phase) of one listed workflow. A running one is asked its phase; a closed one's
    follows from how it closed, with no query (which would replay its history on a worker)."""
    async with limit:
        handle = client.get_workflow_handle(workflow_id)
        try:
            status = (await handle.describe()).status
        except RPCError:
            return "unknown", "unknown"
        if status is None:
            return "unknown", "unknown"
        if status is not WorkflowExecutionStatus.RUNNING:
            return _temporal_status(status), _CLOSED_PHASES.get(status, _temporal_status(status))
        try:
            answer: PoolStatus = await pool_status(handle, rpc_timeout=QUERY_TIMEOUT)
        except (RPCError, Exception):  # noqa: BLE001 — a query can fail many ways; the listing goes on
            return "running", "unknown"
        return "running", answer.phase.value
