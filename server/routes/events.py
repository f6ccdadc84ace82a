"""Event route: `GET /v1/events`, the cluster's event stream as the caller may see it (their own workflows' and keys',
those of workflows whose scope includes them, every node's; an administrator: all), filtered by workflow, node,
kind and time, read by cursor (docs/events.md)."""

from __future__ import annotations

import contextlib
import math
import time
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from berth.contracts import MAX_EVENTS_PAGE, EventKind, EventPage
from berth.contracts.audit import ID_LENGTH
from berth.errors import UserInputError
from berth.security import Identity
from berth.tokens import DURATION, parse_duration
from server.context import Context, ServerContext
from server.events import OFFLINE_SCAN_EVERY_S, note_offline_nodes
from server.guards import Caller
from server.store.events import EventQuery

router = APIRouter()
IdQuery = Annotated[str | None, Query(max_length=ID_LENGTH)]
MAX_SINCE_TEXT = 64


@router.get("/v1/events")
async def list_events(
        context: Context, who: Caller, workflow: IdQuery = None, node: IdQuery = None,
        kind: Annotated[str | None, Query(max_length=1024, description="Kinds (`copy.ready`) or families (`copy`), "
                                          "comma-separated")] = None,
        since: Annotated[str | None, Query(max_length=MAX_SINCE_TEXT, description="A duration ago (`1h`, `7d`), an "
                                           "ISO 8601 time (UTC when it names no zone) or a Unix time")] = None,
        after: Annotated[int | None, Query(ge=0, le=2**63 - 1, description="The cursor: events with a larger id, "
                                           "oldest first; none: the newest `limit`")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_EVENTS_PAGE)] = 100) -> EventPage:
    """The events the caller may see that match, oldest first, and the cursor to read on from (`next_after`)."""
    query = EventQuery(workflow_id=workflow, node_id=node, kinds=kinds_of(kind), since=since_time(since),
                       after=after, limit=limit)
    return await run_in_threadpool(_page, context, who, query)


def _page(context: ServerContext, who: Identity, query: EventQuery) -> EventPage:
    """Blocking. Nodes are looked at first: one gone silent since the last look is an event a reader should see."""
    if context.store.events.due("offline-scan", OFFLINE_SCAN_EVERY_S):
        note_offline_nodes(context.store)
    return context.store.events.page(who, query)


def kinds_of(text: str | None) -> tuple[EventKind, ...]:
    """`copy.ready,node` → copy.ready and every node.* kind; an unknown name is refused naming the known ones."""
    if text is None or not text.strip():
        return ()
    chosen: list[EventKind] = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        found = [kind for kind in EventKind if kind.value == name or kind.value.split(".")[0] == name]
        if not found:
            shown = name if len(name) <= 40 else name[:40] + "…"
            families = sorted({kind.value.split(".")[0] for kind in EventKind})
            raise UserInputError(f"'{shown}' is no event kind: give one of {', '.join(families)} or a kind such as "
                                 "copy.ready (docs/events.md lists them).")
        chosen.extend(kind for kind in found if kind not in chosen)
    return tuple(chosen)


def since_time(text: str | None, now: float | None = None) -> float | None:
    """A Unix time from `1h` (that long ago), an ISO 8601 time (UTC when it names no zone) or a Unix time."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if DURATION.match(text):
        return (time.time() if now is None else now) - parse_duration(text)
    with contextlib.suppress(ValueError):
        if math.isfinite(unix := float(text)):
            return unix
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UserInputError(f"since '{text[:32]}' is neither a duration like 30m, 1h or 7d nor an ISO time like "
                             "2026-01-31T12:00 nor a Unix time.") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
