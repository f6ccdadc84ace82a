"""Events page: the cluster's event stream as the signed-in user may see it (the API decides which), newest 100 that
match the filters (workflow, node, kind or family, since a duration ago), the list refreshed in place every 3 s."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from berth.contracts import EventKind, EventRecord
from berth.errors import BerthError
from console.render import page
from console.routing import ConsoleRoute
from console.session import Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
SHOWN = 100
FILTERS = ("workflow", "node", "kind", "since")
Filter = Annotated[str, Query(max_length=1024)]
FAMILIES = sorted({kind.value.split(".")[0] for kind in EventKind})


@router.get("/events")
async def events(request: Request, session: Signed, workflow: Filter = "", node: Filter = "", kind: Filter = "",
                 since: Filter = "") -> Response:
    return await _events(request, session, "events.html", workflow, node, kind, since)


@router.get("/events/live")
async def events_live(request: Request, session: Signed, workflow: Filter = "", node: Filter = "", kind: Filter = "",
                      since: Filter = "") -> Response:
    return await _events(request, session, "fragments/events_live.html", workflow, node, kind, since)


async def _events(request: Request, session: Session, template: str, *values: str) -> Response:
    filters = {name: value.strip() for name, value in zip(FILTERS, values, strict=True) if value.strip()}
    shown: list[EventRecord] = []
    error = None
    try:
        answer = await session.api.events(workflow=filters.get("workflow"), node=filters.get("node"),
                                          kind=filters.get("kind"), since=filters.get("since"), limit=SHOWN)
        shown = list(answer.events)[::-1]  # newest first on a page
    except BerthError as refused:  # a kind or duration the API does not take: its line above an empty list
        error = str(refused)
    return page(request, session, template, events=shown, filters=filters, error=error, families=FAMILIES,
                query=urlencode(filters), kinds=[kind.value for kind in EventKind])
