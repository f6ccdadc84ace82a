"""Node routes: a node agent's heartbeat (its inventory and what it holds), the node list as the caller
may see it, and draining a node."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import EventKind, NodeHolding, NodeInventory, NodeState, NodeView, WorkflowDrainRequest
from berth.security import Identity
from berth.sites import node_site
from server import events
from server.access import allocation_labels
from server.context import Context, ServerContext
from server.events import Audience, EventDraft
from server.guards import Admin, Caller
from server.refusals import refusals
from server.store import fencing
from server.store.mig_slices import MigSlices
from server.store.mig_view import listed_gpus
from server.store.tables import NodeRow
from server.views import gpu_row
from workflows.rollout_payloads import MoveRequest

router = APIRouter(responses=refusals(503))  # Temporal unreachable while draining
log = logging.getLogger(__name__)


@router.post("/v1/nodes/{node_id}/heartbeat", response_model=NodeState)
async def node_heartbeat(node_id: str, inventory: NodeInventory, context: Context, _who: Admin) -> dict[str, Any]:
    # Stored as the agent sent it, less what it left out (a GPU's extra facts kept): typed, so that no malformed
    # heartbeat reaches the store (it answered 500 from a missing `address` or a `port_start` not a number).
    reported = inventory.model_dump(mode="json", exclude_unset=True)
    held = fencing.holdings(reported)
    row = await run_in_threadpool(_heartbeat, context, node_id, reported, inventory.port_start, held)
    return {"id": row.id, "state": context.store.node_state(row)}


def _heartbeat(context: ServerContext, node_id: str, reported: dict[str, Any], port_start: int,
               held: list[NodeHolding] | None) -> NodeRow:
    """Blocking: record the heartbeat; a node new or back from offline has joined, a leaving one is offline; and now
    and then look for nodes whose heartbeats stopped (server/events.py)."""
    store = context.store
    before = store.node(node_id)
    was_ready = before is not None and store.placements.node_ready(before)
    row = store.heartbeat_node(node_id, reported, port_start, held)
    if reported.get("leaving"):
        events.record(store, events.node_offline(node_id, "its agent is leaving"))
    elif not was_ready:
        gpus = len(row.gpus or [])
        events.record(store, EventDraft(EventKind.NODE_JOINED, f"node {node_id} joined with {gpus} GPUs",
                                        audience=Audience.everyone(), node_id=node_id, once=True,
                                        details={"gpus": gpus, "engine": row.engine}))
    if store.events.due("offline-scan", events.OFFLINE_SCAN_EVERY_S):
        events.note_offline_nodes(store)
    return row


@router.get("/v1/nodes", response_model=list[NodeView], response_model_exclude_unset=True)
async def list_nodes(context: Context, who: Caller) -> list[dict[str, Any]]:
    nodes = await run_in_threadpool(context.store.nodes)
    allocations = await run_in_threadpool(context.store.placements.allocations)
    label = await run_in_threadpool(allocation_labels, context.store, who)
    slices = await run_in_threadpool(MigSlices(context.store).by_node)  # a sliced GPU shows as its slices (issue 36)
    out = []
    for node in nodes:
        held = {a.gpu_index: label(a.copy_id) for a in allocations if a.node_id == node.id}
        gpus = [gpu_row(g, held.get(int(g["index"])), context.store.placements.gpu_health)
                for g in listed_gpus(node.gpus, slices.get(node.id, ()))]
        out.append({"id": node.id, "state": context.store.node_state(node), "address": node.address,
                    "engine": node.engine, "gpus": gpus, "allocated": len(held), "cpus": node.cpus,
                    "memory_gb": node.memory_gb, "labels": node.labels, "taints": node.taints,
                    "draining": node.draining, "last_heartbeat": node.last_heartbeat, **_whereabouts(node.labels)})
    return out


def _whereabouts(labels: dict[str, str] | None) -> dict[str, str]:
    """Its site and failure domain, sent only where its agent reports them (berth/sites.py)."""
    site, domain = node_site(labels)
    return {name: value for name, value in (("site", site), ("failure_domain", domain)) if value is not None}


@router.post("/v1/nodes/{node_id}/drain", response_model=NodeState)
async def drain_node(node_id: str, context: Context, who: Admin,
                     body: WorkflowDrainRequest | None = None) -> dict[str, Any]:
    row = await run_in_threadpool(context.store.set_draining, node_id, True)
    await run_in_threadpool(events.record, context.store, _drain_event(EventKind.NODE_DRAINED, node_id, who, body))
    if body is not None:  # with a grace: each pool moves its copies off the node, draining them first
        await _move_copies(context, node_id, body.grace_s)
    return {"id": row.id, "state": context.store.node_state(row)}


async def _move_copies(context: ServerContext, node_id: str, grace_s: float) -> None:
    """Ask each pool with a published copy on the node to move it. One pool's failure (not running, or a
    worker that does not know the update yet) must not stop the others, nor the drain itself."""
    by_workflow = await run_in_threadpool(context.store.placements.published_copies_on, node_id)
    if not by_workflow:
        return
    client = await context.temporal()
    for workflow_id, copy_ids in sorted(by_workflow.items()):
        request = MoveRequest(copy_ids=tuple(sorted(copy_ids)), grace_s=grace_s, reason=f"node {node_id} drained")
        try:
            await client.get_workflow_handle(workflow_id).execute_update("move_copies", request, result_type=int)
        except Exception as error:  # noqa: BLE001 — logged per workflow; the drain goes on
            log.warning("node %s drained: workflow %s did not move its copies (%s)", node_id, workflow_id, error)


@router.post("/v1/nodes/{node_id}/undrain", response_model=NodeState)
async def undrain_node(node_id: str, context: Context, who: Admin) -> dict[str, Any]:
    row = await run_in_threadpool(context.store.set_draining, node_id, False)
    await run_in_threadpool(events.record, context.store, _drain_event(EventKind.NODE_UNDRAINED, node_id, who, None))
    return {"id": row.id, "state": context.store.node_state(row)}


def _drain_event(kind: EventKind, node_id: str, who: Identity, body: WorkflowDrainRequest | None) -> EventDraft:
    if kind is EventKind.NODE_UNDRAINED:
        return EventDraft(kind, f"{who.user} opened node {node_id} to new copies again", audience=Audience.everyone(),
                          node_id=node_id, actor=who.user)
    moving = f"; its copies move off within {body.grace_s:g} s" if body is not None else ""
    return EventDraft(kind, f"{who.user} drained node {node_id}{moving}", audience=Audience.everyone(),
                      node_id=node_id, actor=who.user)
