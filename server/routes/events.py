"""Event route: `GET /v1/events`, the cluster's event stream as the caller may see it (their own workflows' and keys',
those of workflows whose scope includes them, every node's; an administrator: all), filtered by workflow, node,
kind and time, read by cursor (docs/events.md)."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from berth.contracts import MAX_EVENTS_PAGE, EventPage
from berth.contracts.audit import ID_LENGTH
from berth.contracts.events import EVENT_KINDS_PATTERN, event_kinds
from berth.security import Identity
from berth.tokens import DURATION, parse_duration
from server.context import Context, ServerContext
from server.events import OFFLINE_SCAN_EVERY_S, note_offline_nodes
from server.guards import Caller
from server.store.events import EventQuery

router = APIRouter()
IdQuery = Annotated[str | None, Query(max_length=ID_LENGTH)]
MAX_SINCE_TEXT = 64


# What `since` takes, stated in the schema: a duration or a Unix time. An ISO time is the CLI's to turn into a Unix
# time (on the caller's clock and zone, as `berth audit list` does).
SINCE_PATTERN = r"^\s*([0-9]{1,9}[smhdw]|[0-9]{1,11}(\.[0-9]{1,6})?)\s*$"


@router.get("/v1/events")
async def list_events(
        context: Context, who: Caller, workflow: IdQuery = None, node: IdQuery = None,
        kind: Annotated[str | None, Query(max_length=1024, pattern=EVENT_KINDS_PATTERN,
                                          description="Kinds (`copy.ready`) or families (`copy`), comma-separated")]
        = None,
        since: Annotated[str | None, Query(max_length=MAX_SINCE_TEXT, pattern=SINCE_PATTERN,
                                           description="A duration ago (`1h`, `7d`) or a Unix time")] = None,
        after: Annotated[int | None, Query(ge=0, le=2**63 - 1, description="The cursor: events with a larger id, "
                                           "oldest first; none: the newest `limit`")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_EVENTS_PAGE)] = 100) -> EventPage:
    """The events the caller may see that match, oldest first, and the cursor to read on from (`next_after`)."""
    query = EventQuery(workflow_id=workflow, node_id=node, kinds=event_kinds(kind), since=since_time(since),
                       after=after, limit=limit)
    return await run_in_threadpool(_page, context, who, query)


def _page(context: ServerContext, who: Identity, query: EventQuery) -> EventPage:
    """Blocking. Nodes are looked at first: one gone silent since the last look is an event a reader should see."""
    if context.store.events.due("offline-scan", OFFLINE_SCAN_EVERY_S):
        note_offline_nodes(context.store)
    return context.store.events.page(who, query)


def since_time(text: str | None, now: float | None = None) -> float | None:
    """A Unix time from `1h` (that long ago) or a Unix time (anything else the query's pattern refused already)."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if DURATION.match(text):
        return (time.time() if now is None else now) - parse_duration(text)
    return float(text)
