"""The capacity page: what the cluster's GPUs do now, per node and per GPU model, as stacked bars and tables
(serving, reserved, available, and free on nodes that take no copy now), the nodes by state, and which catalog
entries would fit now; refreshed in place every 10 s. All of it is `GET /v1/capacity`'s answer, as the signed-in
user reads it (other users' copies unnamed)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import Capacity, GpuFigures
from console.charts import BarChart, Series
from console.render import number, page
from console.routing import ConsoleRoute
from console.session import Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
# One name per series, the same in the legend, the tooltips and the tables' headers.
GPU_SERIES = ("serving", "reserved", "available", "free, not taking copies")


def gpu_series(figures: Sequence[GpuFigures]) -> list[Series]:
    """serving + reserved + available + (free − available) = total, per bar."""
    return [Series(GPU_SERIES[0], [f.serving for f in figures], "accent"),
            Series(GPU_SERIES[1], [f.reserved for f in figures], "warn"),
            Series(GPU_SERIES[2], [f.available for f in figures], "ok"),
            Series(GPU_SERIES[3], [f.free - f.available for f in figures], "muted")]


def memory_series(figures: Sequence[GpuFigures]) -> list[Series]:
    """The same split in GB: held (serving or reserved), available, free on nodes that take no copy."""
    return [Series("held", [round(f.memory_gb - f.free_memory_gb, 1) for f in figures], "accent"),
            Series(GPU_SERIES[2], [f.available_memory_gb for f in figures], "ok"),
            Series(GPU_SERIES[3], [round(f.free_memory_gb - f.available_memory_gb, 1) for f in figures], "muted")]


def charts(capacity: Capacity) -> dict[str, BarChart]:
    """Bars for the nodes that have GPUs (a CPU node's row is in the table) and for each GPU model."""
    with_gpus = [node for node in capacity.nodes if node.gpus.total]
    node_ids = [node.id for node in with_gpus]
    node_figures = [node.gpus for node in with_gpus]
    model_names = [f"{model.name} ({number(model.memory_gb)} GB)" for model in capacity.gpu_models]
    model_figures = [model.gpus for model in capacity.gpu_models]
    return {
        "node_gpus": BarChart("GPUs per node", "GPUs", node_ids, gpu_series(node_figures)),
        "node_memory": BarChart("GPU memory per node", "GB", node_ids, memory_series(node_figures)),
        "model_gpus": BarChart("GPUs per GPU model", "GPUs", model_names, gpu_series(model_figures)),
    }


async def _render(request: Request, session: Signed, template: str) -> Response:
    capacity = await session.api.capacity()
    return page(request, session, template, capacity=capacity, charts=charts(capacity), series_names=GPU_SERIES)


@router.get("/capacity")
async def capacity_page(request: Request, session: Signed) -> Response:
    return await _render(request, session, "capacity.html")


@router.get("/capacity/live")
async def capacity_live(request: Request, session: Signed) -> Response:
    return await _render(request, session, "fragments/capacity_live.html")
