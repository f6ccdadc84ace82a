"""Scaling routes: the control worker's autoscaler records what it measured and decided for a pool; anyone
who may read the workflow sees it (`berth workflow explain-scaling`)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts.events import EventKind
from berth.contracts.rollouts import ScalingExplanation
from berth.errors import NotFoundError
from server.context import Context
from server.events import EventDraft, record
from server.guards import Admin, ReadableWorkflow
from server.views import scaling_of

router = APIRouter()

WRITE_EVERY_S = 5.0  # an unchanged explanation is written again at most this often (its `at` moves on)


@router.get("/v1/workflows/{workflow_id}/scaling", response_model=ScalingExplanation)
async def explain_scaling(access: ReadableWorkflow) -> ScalingExplanation:
    explanation = scaling_of(access.endpoint)
    if explanation is None:
        raise NotFoundError(f"the autoscaler has not sized {access.row.id} yet: its pool sets no autoscaling "
                            "thresholds, or the control worker is not running")
    return explanation


@router.put("/v1/internal/workflows/{workflow_id}/scaling", status_code=204)
async def record_scaling(workflow_id: str, body: ScalingExplanation, context: Context, _: Admin) -> None:
    row = await run_in_threadpool(context.store.workflow, workflow_id)
    written = await run_in_threadpool(context.store.note_scaling, row.endpoint_id, body.model_dump(mode="json"),
                                      WRITE_EVERY_S)
    if written and body.decision in ("scale_out", "scale_in"):
        # `once`: the same decision posted again (every few seconds until the pool is resized) is one event.
        await run_in_threadpool(record, context.store, EventDraft(
            EventKind.WORKFLOW_SCALED, f"the autoscaler scaled {workflow_id} to {body.desired} copies: {body.reason}",
            workflow_id=workflow_id, details={"copies": body.desired, "decision": body.decision}, once=True))
