"""Revision and rollout routes (issue 17): roll a pool to a new revision, list and read its revisions,
read and steer its rollout, and drain it with a grace — the pool workflow drives each rollout itself."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from starlette.concurrency import run_in_threadpool
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from berth.contracts import (
    Rollout,
    RolloutCommand,
    RolloutPhase,
    WorkflowDrainRequest,
    WorkflowRevision,
    WorkflowRevisionDefinition,
    WorkflowScaled,
    WorkflowUpdated,
    WorkflowUpdateRequest,
)
from berth.contracts.base import INT32_MAX
from berth.contracts.events import EventKind
from berth.errors import NotFoundError, UserInputError
from catalog.definition import WorkflowDefinition
from server.access import WorkflowAccess
from server.context import Context, ServerContext
from server.events import EventDraft, record
from server.guards import ReadableWorkflow, owned_workflow
from server.policy_check import check_surge
from server.pool_query import pool_status
from server.refusals import refusals
from server.revisions import NothingToChange, prepare_update
from server.routes.workflows import QUERY_TIMEOUT, DefinitionReader
from server.store.revisions import Revision
from server.submission import copy_timings
from server.views import endpoint_url
from workflows.payloads import Owner, PoolInput, PoolStatus, ScaleRequest
from workflows.pool_workflow import PoolWorkflow
from workflows.rollout_payloads import RolloutRequest

router = APIRouter(responses=refusals(409, 503))  # a rollout in progress; Temporal unreachable

Updater = Annotated[WorkflowAccess, Depends(owned_workflow("update it"))]
Steerer = Annotated[WorkflowAccess, Depends(owned_workflow("steer its rollout"))]
Drainer = Annotated[WorkflowAccess, Depends(owned_workflow("drain it"))]
# Values whose names say they hold a credential: a reader who may not read the definition sees them masked.
_SECRET_WORDS = ("key", "password", "token", "secret")


@router.post("/v1/workflows/{workflow_id}/revisions", response_model=WorkflowUpdated)
async def update_workflow(workflow_id: str, body: WorkflowUpdateRequest, context: Context,
                          access: Updater) -> dict[str, Any]:
    row, who = access.row, access.who
    url = endpoint_url(context, row.endpoint_id)
    status = await _status(context, workflow_id)  # which revision serves: the update builds on it
    try:
        revision, definition, merged = await run_in_threadpool(prepare_update, context, row, body, who,
                                                               status.revision if status else None)
    except NothingToChange as nothing:
        return {"id": workflow_id, "revision": nothing.revision, "url": url, "message": str(nothing), "rollout": None}
    desired = status.desired_copies if status else max(definition.pool.min_replicas, 1)
    await run_in_threadpool(check_surge, context, workflow_id, definition, body.strategy, desired)
    signed = await run_in_threadpool(_signed_input, context, access, definition)
    request = RolloutRequest(revision=revision, input=signed, strategy=body.strategy, by=who.user)
    rollout = await _execute(context, workflow_id, "roll_to", request, Rollout)
    await run_in_threadpool(context.store.revisions.add_revision, workflow_id, revision,
                            definition.model_dump(mode="json"), merged, who.user, body.strategy.model_dump(mode="json"))
    await run_in_threadpool(record, context.store, EventDraft(
        EventKind.WORKFLOW_UPDATED, f"{who.user} rolls {workflow_id} from revision {rollout.from_revision} to "
        f"{revision} ({body.strategy.kind.value})", workflow_id=workflow_id, actor=who.user,
        details={"revision": revision, "strategy": body.strategy.kind.value}))
    return {"id": workflow_id, "revision": revision, "url": url, "rollout": rollout.model_dump(mode="json"),
            "message": f"rolling {workflow_id} from revision {rollout.from_revision} to {revision} "
                       f"({body.strategy.kind.value}); watch it with `berth workflow rollout status {workflow_id}`"}


def _signed_input(context: ServerContext, access: WorkflowAccess, definition: WorkflowDefinition) -> PoolInput:
    """The next revision's input, built as start_workflow builds the first: the same IDs and timings, and the
    workflow's original owner (whoever asks for the update), signed for that owner."""
    row = access.row
    endpoint = context.store.endpoint(row.endpoint_id)
    unsigned = PoolInput(workflow_id=row.id, endpoint_id=row.endpoint_id,
                         endpoint_url=endpoint_url(context, row.endpoint_id),
                         owner=Owner(user=row.owner, groups=tuple(endpoint.groups or ()), org=row.org),
                         definition=definition, timings=copy_timings(context),
                         placement_backend=context.settings.placement_backend)
    grant = context.signing.workflow_grant(row.owner, row.id, unsigned.digest())
    return unsigned.model_copy(update={"grant": grant})


async def _execute(context: ServerContext, workflow_id: str, update: Any, argument: Any,
                   result_type: type[Any] | None) -> Any:
    """Run one update on the pool workflow; its refusal reads as the caller's error, its absence as not found."""
    client = await context.temporal()
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    try:
        if result_type is None:
            return await handle.execute_update(update, argument)
        return await handle.execute_update(update, argument, result_type=result_type)
    except WorkflowUpdateFailedError as error:
        cause = error.cause
        raise UserInputError(getattr(cause, "message", None) or str(cause or error)) from None
    except RPCError as error:
        raise NotFoundError(f"Workflow '{workflow_id}' is not running ({error.message}).") from None


async def _status(context: ServerContext, workflow_id: str) -> PoolStatus | None:
    try:
        client = await context.temporal()
        status: PoolStatus = await pool_status(client.get_workflow_handle(workflow_id),
                                                rpc_timeout=QUERY_TIMEOUT)
    except Exception:  # noqa: BLE001 — a query can fail many ways; the listing goes on without states
        return None
    return status


def revision_state(revision: int, status: PoolStatus | None) -> str:
    """What a revision is to the pool now, from its status; "" when the pool could not be asked."""
    if status is None:
        return ""
    rollout = status.rollout
    if revision in status.rolled_back or (rollout is not None and revision == rollout.to_revision
                                          and rollout.phase is RolloutPhase.ROLLED_BACK):
        return "rolled back"
    if rollout is not None and revision == rollout.to_revision and rollout.phase not in RolloutPhase.finished():
        return "rolling out"
    if revision == status.revision:
        return "serving"
    return "replaced" if revision < status.revision else ""


def _shown_values(values: dict[str, Any], full: bool) -> dict[str, Any]:
    if full:
        return values
    return {k: "***" if any(w in k.lower() for w in _SECRET_WORDS) and v not in (None, "") else v
            for k, v in values.items()}


@router.get("/v1/workflows/{workflow_id}/revisions", response_model=list[WorkflowRevision])
async def list_revisions(workflow_id: str, access: ReadableWorkflow, context: Context) -> list[dict[str, Any]]:
    revisions: list[Revision] = await run_in_threadpool(context.store.revisions.revisions, access.row)
    status = await _status(context, workflow_id)
    full = access.who.admin or access.who.user == access.row.owner
    return [{"workflow_id": workflow_id, "revision": r.revision, "entry": access.row.entry,
             "values": _shown_values(r.values, full), "by": r.by, "at": r.at,
             "strategy": str(r.strategy.get("kind", "rolling")), "state": revision_state(r.revision, status)}
            for r in revisions]


@router.get("/v1/workflows/{workflow_id}/revisions/{revision}", response_model=WorkflowRevisionDefinition)
async def read_revision(workflow_id: str, revision: Annotated[int, Path(le=INT32_MAX)], context: Context,
                        access: DefinitionReader) -> dict[str, Any]:
    revisions: list[Revision] = await run_in_threadpool(context.store.revisions.revisions, access.row)
    found = next((r for r in revisions if r.revision == revision), None)
    if found is None:
        known = ", ".join(str(r.revision) for r in revisions)
        raise NotFoundError(f"Workflow '{workflow_id}' has no revision {revision}. Its revisions: {known}.")
    return {"id": workflow_id, "revision": revision, "entry": access.row.entry, "definition": found.definition}


@router.get("/v1/workflows/{workflow_id}/rollout", response_model=Rollout)
async def rollout_status(workflow_id: str, access: ReadableWorkflow, context: Context) -> dict[str, Any]:
    status = await _status(context, workflow_id)
    if status is None or status.rollout is None:
        raise NotFoundError(f"{workflow_id} has had no rollout yet; start one with "
                            f"`berth workflow update {workflow_id} --values K=V`.")
    return status.rollout.model_dump(mode="json")


@router.post("/v1/workflows/{workflow_id}/rollout", response_model=Rollout)
async def steer_rollout(workflow_id: str, body: RolloutCommand, context: Context, access: Steerer) -> dict[str, Any]:
    command = RolloutCommand(action=body.action, by=access.who.user)
    rollout: Rollout = await _execute(context, workflow_id, "rollout_command", command, Rollout)
    return rollout.model_dump(mode="json")


@router.post("/v1/workflows/{workflow_id}/drain", response_model=WorkflowScaled)
async def drain_workflow(workflow_id: str, body: WorkflowDrainRequest, context: Context,
                         access: Drainer) -> dict[str, Any]:
    definition = WorkflowDefinition.model_validate(
        await run_in_threadpool(context.store.workflow_definition, access.row))
    request = ScaleRequest(replicas=definition.pool.min_replicas, reason=f"drained by {access.who.user}",
                           source="drain", grace_s=body.grace_s)
    result = await _execute(context, workflow_id, PoolWorkflow.scale, request, None)
    await run_in_threadpool(record, context.store, EventDraft(
        EventKind.WORKFLOW_SCALED, f"{access.who.user} drained {workflow_id} to {request.replicas} copies",
        workflow_id=workflow_id, actor=access.who.user, details={"copies": request.replicas, "drain": True}))
    return {"id": workflow_id, **result.model_dump(mode="json")}
