"""Node pages: the capacity strip (free of all GPUs), a row per node with its GPUs and who holds each, the
table refreshed in place every 3 s, and drain/undrain for administrators (the API decides who may)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import NodeView
from console.render import page, redirect
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
WIDTH_STEP = 5  # the strip's widths are the w-0 … w-100 classes in console.css (no inline style under the CSP)


@dataclass(frozen=True)
class Capacity:
    free: int
    total: int

    @property
    def used_width(self) -> int:
        """The used part's width class, in steps of WIDTH_STEP percent; the free part takes the rest."""
        if self.total == 0:
            return 0
        return round((self.total - self.free) * 100 / self.total / WIDTH_STEP) * WIDTH_STEP


def capacity(nodes: list[NodeView]) -> Capacity:
    gpus = [gpu for node in nodes for gpu in node.gpus]
    return Capacity(free=sum(1 for gpu in gpus if gpu.allocated_to is None), total=len(gpus))


@router.get("/nodes")
async def nodes(request: Request, session: Signed) -> Response:
    listed = await session.api.nodes()
    return page(request, session, "nodes.html", nodes=listed, capacity=capacity(listed))


@router.get("/nodes/live")
async def nodes_live(request: Request, session: Signed) -> Response:
    listed = await session.api.nodes()
    return page(request, session, "fragments/nodes_live.html", nodes=listed, capacity=capacity(listed))


@router.post("/nodes/{node_id}/draining", dependencies=[CsrfChecked])
async def set_draining(request: Request, session: Signed, node_id: str) -> Response:
    form = await request.form()
    # An unhandled BerthError (a non-administrator, an unknown node) is the API's line on error.html.
    await session.api.set_node_draining(node_id, form.get("draining") == "true")
    return redirect("/ui/nodes")
