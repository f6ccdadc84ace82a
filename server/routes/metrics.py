"""The control plane's Prometheus figures (server/control_metrics.py): `GET /metrics`, for a scraper on
this machine or one holding an administrator's API token (the figures name nodes and count everyone's
copies, which are no business of other users)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from berth.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from server.context import Context
from server.control_metrics import ControlMetrics
from server.guards import admin, caller
from server.refusals import refusals

router = APIRouter(responses=refusals(404))  # metrics turned off (BERTH_METRICS=off)
LOOPBACK = frozenset({"127.0.0.1", "::1"})


async def metrics_reader(request: Request, context: Context,
                         authorization: str | None = Header(None)) -> ControlMetrics:
    """The app's metrics if they are on and the caller is on loopback or an administrator."""
    metrics: ControlMetrics | None = request.app.state.metrics
    if metrics is None:
        raise NotFoundError("Metrics are off (BERTH_METRICS=off)")
    if request.client is not None and request.client.host in LOOPBACK:
        return metrics
    try:
        await admin(await caller(context, authorization))
    except (AuthenticationError, PermissionDeniedError) as refusal:
        raise type(refusal)("Metrics are served to loopback callers and administrators' API tokens only "
                            f"({refusal})") from None
    return metrics


MetricsReader = Annotated[ControlMetrics, Depends(metrics_reader)]


# Not JSON: Prometheus's text exposition format, documented as such in the OpenAPI schema.
PROMETHEUS_TEXT: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus's text exposition format (docs/operations.md)",
          "content": {"text/plain": {"schema": {"type": "string"}}}}}


@router.get("/metrics", response_class=PlainTextResponse, responses=PROMETHEUS_TEXT)
async def metrics(reader: MetricsReader) -> Response:
    await reader.phases.refresh()  # Temporal first (async, cached); then the store, read off the event loop
    body = await run_in_threadpool(generate_latest, reader.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
