"""A copy's life as cluster events, where the control plane learns each step: placed or blocked (the reservation
route), ready (its publication), failed or stopped (its release, asking the copy's workflow how it ended). Each is
seen as the copy's workflow is (server/events.py)."""

from __future__ import annotations

import logging
from datetime import timedelta

from starlette.concurrency import run_in_threadpool

from berth.contracts import CopyInfo, CopyRecord, CopyStatus, EventKind, ReserveRequest, ReserveResult
from server.access import LOG_TAIL_MARK
from server.context import ServerContext
from server.events import EventDraft, copy_workflow, record
from workflows.copy import CopyWorkflow

log = logging.getLogger(__name__)
QUERY_TIMEOUT = timedelta(seconds=5)
ENDED_ON_ITS_OWN = (CopyStatus.FAILED, CopyStatus.INTERRUPTED)


def reserved(request: ReserveRequest, result: ReserveResult) -> EventDraft:
    """`copy.placed` with its nodes, or `placement.blocked` with the scheduler's reason: once each, however often
    the copy's workflow asks again (a retried reservation gets the same answer; a blocked copy asks every few s)."""
    if result.placement is None:
        return EventDraft(EventKind.PLACEMENT_BLOCKED, f"copy {request.copy_id} waits: {result.blocked_reason}",
                          workflow_id=request.workflow_id, copy_id=request.copy_id, once=True,
                          details={"nodes": request.nodes, "gpus_per_node": request.gpus_per_node})
    ranks = result.placement.ranks
    where = ", ".join(f"{rank.node_id} (GPUs {', '.join(map(str, rank.gpus)) or 'none'})" for rank in ranks)
    return EventDraft(EventKind.COPY_PLACED, f"copy {request.copy_id} placed on {where}",
                      workflow_id=request.workflow_id, copy_id=request.copy_id,
                      node_id=ranks[0].node_id if ranks else None, once=True,
                      details={"nodes": ",".join(rank.node_id for rank in ranks),
                               "gpus": sum(len(rank.gpus) for rank in ranks)})


def ready(copy_id: str, copy: CopyRecord) -> EventDraft:
    return EventDraft(EventKind.COPY_READY, f"copy {copy_id} is ready (revision {copy.revision})",
                      workflow_id=copy.workflow_id, copy_id=copy_id, endpoint_id=copy.endpoint_id, once=True,
                      details={"revision": copy.revision})


async def record_end(context: ServerContext, copy_id: str) -> None:
    """After a copy's placement was released: `copy.failed` when it ended on its own, else `copy.stopped`. Its
    workflow knows which (its `info` query, answered while it releases); unreachable: `copy.stopped`, said so."""
    info = await _copy_info(context, copy_id)
    draft = ended(copy_id, info)
    await run_in_threadpool(record, context.store, draft)


def ended(copy_id: str, info: CopyInfo | None) -> EventDraft:
    if info is None:
        status, detail = "unknown", "its workflow did not say how it ended"
    else:
        status = info.status.value
        # A reason may quote the copy's log lines: those are its owner's (server/access.py), not every reader's.
        detail = info.detail.partition(LOG_TAIL_MARK)[0].strip() or info.status.value
    failed = info is not None and info.status in ENDED_ON_ITS_OWN
    kind = EventKind.COPY_FAILED if failed else EventKind.COPY_STOPPED
    return EventDraft(kind, f"copy {copy_id} {'failed' if failed else 'ended'}: {detail}",
                      workflow_id=copy_workflow(copy_id), copy_id=copy_id, details={"status": status}, once=True)


async def _copy_info(context: ServerContext, copy_id: str) -> CopyInfo | None:
    try:
        client = await context.temporal()
        return await client.get_workflow_handle(copy_id).query(CopyWorkflow.info, rpc_timeout=QUERY_TIMEOUT)
    except Exception as error:  # noqa: BLE001 — the event says the outcome is unknown; the release stands
        log.info("copy %s released: its workflow did not answer (%s)", copy_id, type(error).__name__)
        return None
