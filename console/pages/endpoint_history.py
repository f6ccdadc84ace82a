"""An endpoint's last hour on its page: requests and failures a second, p50/p99 latency and ready copies, one point
a minute, as line charts and a table, from `GET /v1/endpoints/{id}/history`; the part refreshes itself every minute
(the API's grain). An API refusal (outside the scope: 404) is the page's error, like the endpoint's own."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import EndpointHistory
from berth.errors import BerthError
from console.charts import LineChart, Series
from console.render import page
from console.routing import ConsoleRoute
from console.session import Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
WINDOW_S = 3600


@dataclass(frozen=True)
class HistoryView:
    history: EndpointHistory | None
    error: str | None  # the API's line when the history could not be read (the rest of the page still shows)
    charts: dict[str, LineChart]


def history_charts(history: EndpointHistory) -> dict[str, LineChart]:
    points, x = history.points, [point.at for point in history.points]
    return {
        "traffic": LineChart("Requests", "per s", x, [
            Series("requests", [p.requests_per_s for p in points], "accent"),
            Series("failed", [round(p.failures / history.step_s, 4) for p in points], "bad")]),
        "latency": LineChart("Latency of answered requests", "ms", x, [
            Series("p50", [p.p50_ms for p in points], "ok"),
            Series("p99", [p.p99_ms for p in points], "warn")]),
        "copies": LineChart("Ready copies", "copies", x, [
            Series("ready", [p.ready_copies for p in points], "violet")]),
    }


async def history_view(session: Session, endpoint_id: str) -> HistoryView:
    try:
        history = await session.api.endpoint_history(endpoint_id, WINDOW_S)
    except BerthError as error:
        return HistoryView(None, str(error), {})
    return HistoryView(history, None, history_charts(history))


@router.get("/endpoints/{endpoint_id}/history")
async def endpoint_history_live(request: Request, session: Signed, endpoint_id: str) -> Response:
    # The endpoint's own check first: outside its scope this is the API's 404 on the error page.
    endpoint = await session.api.endpoint_detail(endpoint_id)
    return page(request, session, "fragments/endpoint_history.html", endpoint=endpoint,
                recent=await history_view(session, endpoint_id))
