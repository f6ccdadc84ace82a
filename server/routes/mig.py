"""MIG slice routes (issue 36, docs/mig.md): administrators list, make and remove the MIG slices of a node's H100s,
and name the instance made for a pending slice (the node agent, under the `mig_apply` cluster setting). The records
are what placement goes by (server/store/mig_slices.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.concurrency import run_in_threadpool

from berth.contracts import EventKind
from berth.contracts.mig import MigSlice, MigSliceDeleted, MigSliceRequest, MigSliceUuid
from server import events
from server.context import Context
from server.events import Audience, EventDraft
from server.guards import Admin
from server.refusals import refusals
from server.store.mig_slices import MigSlices

router = APIRouter()
NodeId = Annotated[str, Path(min_length=1, max_length=128)]
SliceId = Annotated[int, Path(ge=0, le=1023)]


@router.get("/v1/nodes/{node_id}/mig")
async def list_mig_slices(node_id: NodeId, context: Context, _who: Admin) -> list[MigSlice]:
    return await run_in_threadpool(MigSlices(context.store).on_node, node_id)


@router.post("/v1/nodes/{node_id}/mig", status_code=201, responses=refusals(409))
async def create_mig_slice(node_id: NodeId, request: MigSliceRequest, context: Context, who: Admin) -> MigSlice:
    """400: not an H100 80GB, an unknown profile, or more than the GPU's slices have left; 409: a copy holds the GPU."""
    made = await run_in_threadpool(MigSlices(context.store).create, node_id, request, who.user)
    await run_in_threadpool(events.record, context.store, EventDraft(
        EventKind.NODE_SLICED, f"{who.user} made MIG slice {made.id} ({made.profile}) of GPU {made.gpu} on node "
        f"{node_id}", audience=Audience.everyone(), node_id=node_id, actor=who.user,
        details={"slice": made.id, "gpu": made.gpu, "profile": made.profile}))
    return made


@router.put("/v1/nodes/{node_id}/mig/{slice_id}")
async def name_mig_slice(node_id: NodeId, slice_id: SliceId, request: MigSliceUuid, context: Context,
                         _who: Admin) -> MigSlice:
    return await run_in_threadpool(MigSlices(context.store).set_uuid, node_id, slice_id, request.uuid)


@router.delete("/v1/nodes/{node_id}/mig/{slice_id}", responses=refusals(409))
async def delete_mig_slice(node_id: NodeId, slice_id: SliceId, context: Context, who: Admin) -> MigSliceDeleted:
    """409 while a copy holds the slice."""
    gone = await run_in_threadpool(MigSlices(context.store).delete, node_id, slice_id)
    await run_in_threadpool(events.record, context.store, EventDraft(
        EventKind.NODE_UNSLICED, f"{who.user} removed MIG slice {slice_id} from node {node_id}",
        audience=Audience.everyone(), node_id=node_id, actor=who.user, details={"slice": slice_id}))
    return gone
