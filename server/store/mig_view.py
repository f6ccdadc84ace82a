"""How placement sees MIG slices (issue 36): each slice with a UUID is a GPU of its own, its parent none.

Read by server/store/placement_view.py for every node view it builds, and by server/store/mig_slices.py, which writes
the slices: a module of its own so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from berth.mig_profiles import profile_named
from server.inventory import Inventory
from server.scheduler import Decision, GpuView, NodeView
from server.store.tables import MigSliceRow, NodeRow

FIRST_SLICE_ID = 512  # node agents number whole GPUs from 0: a node with 512 of them is far off
LAST_SLICE_ID = 1023  # the largest GPU index a heartbeat's holdings may name (berth/contracts/placement.py)


def slices_of(s: Session, where: ColumnElement[bool] | None = None) -> dict[str, list[MigSliceRow]]:
    """The slices of every node (or of the nodes `where` picks), by node id: one query, empty on most clusters."""
    query = select(MigSliceRow).order_by(MigSliceRow.node_id, MigSliceRow.id)
    if where is not None:
        query = query.where(MigSliceRow.node_id.in_(select(NodeRow.id).where(where)))
    by_node: dict[str, list[MigSliceRow]] = {}
    for row in s.scalars(query):
        by_node.setdefault(row.node_id, []).append(row)
    return by_node


def sliced(gpus: tuple[GpuView, ...], slices: Iterable[MigSliceRow]) -> tuple[GpuView, ...]:
    """A node's GPUs as placement sees them: a GPU with slices is gone (unschedulable while they exist), each slice with
    a UUID is a GPU of its profile's memory named by that UUID. A pending one (no UUID yet) is nothing placeable, nor is
    one whose parent the node's agent no longer reports (a GPU fallen off the bus takes its slices with it)."""
    slices = list(slices)
    parents = {row.gpu for row in slices}
    ids = {row.id for row in slices}
    reported = {gpu.index for gpu in gpus}
    whole = [gpu for gpu in gpus if gpu.index not in parents and gpu.index not in ids]
    # A slice is as healthy as its parent: its temperature and ECC errors are the parent's (server/gpu_health.py).
    health = {gpu.index: gpu.unhealthy for gpu in gpus}
    parts = [GpuView(row.id, profile_named(row.profile).memory_gb, f"MIG {row.profile}", health.get(row.gpu),
                     device=row.uuid)
             for row in slices if row.uuid and row.gpu in reported]
    return (*whole, *parts)  # whole GPUs first: a copy of several GPUs takes them before slices (docs/mig.md)


def on_slices(decision: Decision, inventory: Inventory) -> bool:
    """Whether a decision gives some rank more than one GPU with a slice among them: CUDA enumerates a single MIG
    device per process (NVIDIA's MIG user guide, "CUDA Device Enumeration"), so such a rank could not use them."""
    for node_id, gpus in decision.ranks:
        node = inventory.get(node_id)
        if len(gpus) > 1 and node is not None and any(gpu.device for gpu in node.gpus if gpu.index in gpus):
            return True
    return False


def whole(node: NodeView) -> NodeView:
    """The node with its slices left out: what a copy of several GPUs a node may be placed on."""
    if not any(gpu.device for gpu in node.gpus):
        return node
    gpus = tuple(gpu for gpu in node.gpus if not gpu.device)
    indices = {gpu.index for gpu in gpus}
    return replace(node, gpus=gpus, busy_gpus=frozenset(node.busy_gpus & indices))


def listed_gpus(gpus: list[dict[str, Any]], slices: Iterable[MigSliceRow]) -> list[dict[str, Any]]:
    """A node's GPUs as `node list` shows them, as placement sees them: a sliced GPU's slices in its place, each with
    its id as index and its MIG UUID (none while pending)."""
    slices = list(slices)
    if not slices:
        return gpus
    parents = {int(gpu["index"]): gpu for gpu in gpus}
    ids = {row.gpu for row in slices} | {row.id for row in slices}
    rows = [gpu for gpu in gpus if int(gpu["index"]) not in ids]
    for row in slices:
        parent = parents.get(row.gpu, {})
        rows.append({"index": row.id, "name": f"MIG {row.profile} of GPU {row.gpu}" + ("" if row.uuid else ", pending"),
                     "memory_gb": profile_named(row.profile).memory_gb, "uuid": row.uuid,
                     # the parent's readings: a slice is as hot, and has the ECC errors, of its GPU
                     **{k: parent[k] for k in ("temperature_c", "power_w", "ecc_uncorrected") if k in parent},
                     **({"simulated": True} if parent.get("simulated") else {})})
    return rows
