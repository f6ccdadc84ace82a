"""Node routes: a node agent's heartbeat (its inventory and what it holds), the node list as the caller
may see it, and draining a node."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import NodeState, NodeView
from server import fencing
from server.access import allocation_labels
from server.context import Context
from server.guards import Admin, Caller
from server.views import gpu_row

router = APIRouter()


@router.post("/v1/nodes/{node_id}/heartbeat", response_model=NodeState)
async def node_heartbeat(node_id: str, inventory: dict[str, Any], context: Context, _who: Admin) -> dict[str, Any]:
    port_start = int(inventory.get("port_start", 0))
    held = fencing.holdings(inventory)
    row = await run_in_threadpool(context.store.heartbeat_node, node_id, inventory, port_start, held)
    return {"id": row.id, "state": context.store.node_state(row)}


@router.get("/v1/nodes", response_model=list[NodeView], response_model_exclude_unset=True)
async def list_nodes(context: Context, who: Caller) -> list[dict[str, Any]]:
    nodes = await run_in_threadpool(context.store.nodes)
    allocations = await run_in_threadpool(context.store.placements.allocations)
    label = await run_in_threadpool(allocation_labels, context.store, who)
    out = []
    for node in nodes:
        held = {a.gpu_index: label(a.copy_id) for a in allocations if a.node_id == node.id}
        gpus = [gpu_row(g, held.get(int(g["index"]))) for g in node.gpus]
        out.append({"id": node.id, "state": context.store.node_state(node), "address": node.address,
                    "engine": node.engine, "gpus": gpus, "allocated": len(held), "cpus": node.cpus,
                    "memory_gb": node.memory_gb, "labels": node.labels, "taints": node.taints,
                    "draining": node.draining, "last_heartbeat": node.last_heartbeat})
    return out


@router.post("/v1/nodes/{node_id}/drain", response_model=NodeState)
async def drain_node(node_id: str, context: Context, _who: Admin) -> dict[str, Any]:
    row = await run_in_threadpool(context.store.set_draining, node_id, True)
    return {"id": row.id, "state": context.store.node_state(row)}


@router.post("/v1/nodes/{node_id}/undrain", response_model=NodeState)
async def undrain_node(node_id: str, context: Context, _who: Admin) -> dict[str, Any]:
    row = await run_in_threadpool(context.store.set_draining, node_id, False)
    return {"id": row.id, "state": context.store.node_state(row)}
