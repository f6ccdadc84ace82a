"""Workflow pages: the user's workflows (a table htmx refreshes), and one workflow — its live status (phase,
copies with their GPUs, events, rollout with its commands, the autoscaler's last decision) re-fetched every
2 s, its revisions, its jobs' log tails, and the stop and scale forms. Everything is what the REST API
answers the signed-in user; a refusal is shown in the API's own words."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import NodeView, Rollout, RolloutAction, RolloutCommand, RolloutPhase, WorkflowDescription
from berth.errors import BerthError, UserInputError
from console.pages.form_values import form_text
from console.render import page, redirect
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
LOG_LINES = 200
# A POST's outcome carried across its 303 (a query string would let any link put words on the page).
NOTICE_COOKIE = "berth_notice"
MAX_NOTICE = 500


@router.get("/workflows")
async def workflows(request: Request, session: Signed, live: int = 0) -> Response:
    listed = sorted(await session.api.workflows(), key=lambda w: w.created_at, reverse=True)
    template = "fragments/workflows_live.html" if live else "workflows.html"
    return page(request, session, template, workflows=listed)


def gpus_by_copy(nodes: list[NodeView]) -> dict[str, dict[str, list[int]]]:
    """copy id → node id → the GPU indexes it holds there (as the node list shows them to this user)."""
    held: dict[str, dict[str, list[int]]] = {}
    for node in nodes:
        for gpu in node.gpus:
            if gpu.allocated_to:
                held.setdefault(gpu.allocated_to, {}).setdefault(node.id, []).append(gpu.index)
    return held


async def live_context(session: Session, workflow_id: str) -> dict[str, Any]:
    """What the live part shows: the description, the GPUs per copy, and the rollout commands."""
    description: WorkflowDescription = await session.api.describe_workflow(workflow_id)
    try:
        gpus = gpus_by_copy(await session.api.nodes())
    except BerthError:  # the node list is a garnish here: the page goes on without the GPU column's facts
        gpus = {}
    events = sorted(description.events or (), key=lambda e: e.at)
    return {"workflow": description, "gpus": gpus, "events": events, "log_lines": LOG_LINES,
            "rollout_actions": rollout_actions(description.rollout)}


def rollout_actions(rollout: Rollout | None) -> list[str]:
    """The commands worth a button now: none once the rollout finished; resume only while paused, pause only
    while not (the workflow judges every command anyway, and its refusal is shown)."""
    if rollout is None or rollout.phase in RolloutPhase.finished():
        return []
    paused = rollout.phase is RolloutPhase.PAUSED
    return [a.value for a in RolloutAction if a is not (RolloutAction.PAUSE if paused else RolloutAction.RESUME)]


async def logs_context(session: Session, workflow_id: str, job: str) -> dict[str, Any]:
    """The jobs that have logs, the chosen one (else the first), and its tail — or why there is none."""
    try:
        jobs = (await session.api.workflow_log(workflow_id, None)).jobs or []
        chosen = job or (jobs[0] if jobs else "")
        text = (await session.api.workflow_log(workflow_id, chosen, lines=LOG_LINES)).text if chosen else None
    except BerthError as error:
        return {"jobs": [], "job": job, "log_text": None, "log_error": str(error)}
    return {"jobs": jobs, "job": chosen, "log_text": text, "log_error": None}


async def detail(request: Request, session: Session, workflow_id: str, status_code: int = 200, job: str = "",
                 error: str | None = None, copies_typed: str | None = None) -> Response:
    """The whole workflow page; a refused POST re-renders it with the API's line and what was typed."""
    context = await live_context(session, workflow_id)
    try:
        revisions = await session.api.workflow_revisions(workflow_id)
    except BerthError:  # revisions are history: a page without them still shows the workflow
        revisions = []
    context.update(await logs_context(session, workflow_id, job))
    notice = unquote(request.cookies.get(NOTICE_COOKIE, ""))[:MAX_NOTICE] or None
    desired = context["workflow"].desired_copies
    copies_value = copies_typed if copies_typed is not None else ("" if desired is None else str(desired))
    response = page(request, session, "workflow.html", status_code, revisions=revisions, notice=notice,
                    error=error, copies_value=copies_value, **context)
    if notice is not None:
        response.delete_cookie(NOTICE_COOKIE, path=_path(workflow_id), httponly=True, samesite="strict")
    return response


def _path(workflow_id: str) -> str:
    return f"/ui/workflows/{quote(workflow_id, safe='')}"


def with_notice(request: Request, workflow_id: str, notice: str) -> Response:
    """303 to the workflow page, which shows `notice` once."""
    response = redirect(_path(workflow_id))
    response.set_cookie(NOTICE_COOKIE, quote(notice[:MAX_NOTICE]), path=_path(workflow_id), max_age=60,
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


@router.get("/workflows/{workflow_id}")
async def workflow(request: Request, session: Signed, workflow_id: str, job: str = "") -> Response:
    return await detail(request, session, workflow_id, job=job)


@router.get("/workflows/{workflow_id}/live")
async def workflow_live(request: Request, session: Signed, workflow_id: str) -> Response:
    try:
        context = await live_context(session, workflow_id)
    except BerthError as error:
        # Still the #live element, still polling: a Temporal hiccup should not replace the page with an error.
        return page(request, session, "fragments/workflow_live.html", workflow_id=workflow_id,
                    live_error=str(error))
    return page(request, session, "fragments/workflow_live.html", workflow_id=workflow_id, live_error=None,
                **context)


@router.post("/workflows/{workflow_id}/stop", dependencies=[CsrfChecked])
async def stop(request: Request, session: Signed, workflow_id: str) -> Response:
    try:
        await session.api.stop_workflow(workflow_id)
    except BerthError as error:
        return await detail(request, session, workflow_id, error.http_status, error=str(error))
    return with_notice(request, workflow_id, f"Stop requested for {workflow_id}.")


@router.post("/workflows/{workflow_id}/scale", dependencies=[CsrfChecked])
async def scale(request: Request, session: Signed, workflow_id: str) -> Response:
    typed = (await form_text(request)).get("copies", "").strip()
    try:
        if not typed.isdigit():
            raise UserInputError(f"Copies must be a whole number, 0 or more, not '{typed[:40]}'.")
        scaled = await session.api.scale_workflow(workflow_id, int(typed))
    except BerthError as error:
        return await detail(request, session, workflow_id, error.http_status, error=str(error), copies_typed=typed)
    return with_notice(request, workflow_id, scaled.message)


@router.post("/workflows/{workflow_id}/rollout", dependencies=[CsrfChecked])
async def rollout(request: Request, session: Signed, workflow_id: str) -> Response:
    action = (await form_text(request)).get("action", "")
    try:
        if action not in {a.value for a in RolloutAction}:
            raise UserInputError(f"No rollout command '{action[:40]}'; the commands: "
                                 + ", ".join(a.value for a in RolloutAction) + ".")
        steered = await session.api.rollout_command(workflow_id, RolloutCommand(action=RolloutAction(action)))
    except BerthError as error:
        return await detail(request, session, workflow_id, error.http_status, error=str(error))
    said = f" {steered.message}" if steered.message else ""
    return with_notice(request, workflow_id, f"Rollout {action}: now {steered.phase.value}.{said}")
