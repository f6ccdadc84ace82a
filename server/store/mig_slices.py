"""MIG slices in the store (issue 36): an administrator slices a node's H100 into profiles from berth/mig_profiles.py,
and placement sees each slice as a GPU of its own while its parent takes no copy.

A slice's id is the GPU index placement gives it on its node, from `FIRST_SLICE_ID` up, apart from the indices node
agents report for whole GPUs: an allocation of (node, slice id) is an allocation like any other, so the allocations'
unique (node, GPU) constraint keeps two copies off one slice as it keeps them off one GPU. Every write here takes the
placement lock and stamps the node (`placement_view.changed`): no reservation runs beside it, and every API process's
view re-reads the node before its next decision. The lock is also what makes "the parent is held by a copy" and "the
slice is held" true when the refusal or the write happens, not a moment before.
"""

from __future__ import annotations

import time
import uuid as uuids
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from berth.contracts.mig import MigSlice, MigSliceDeleted, MigSliceRequest
from berth.errors import ConflictError, NotFoundError, UserInputError
from berth.mig_profiles import budget_refusal, h100_shaped, profile_named
from server.store import placement_view
from server.store.mig_view import FIRST_SLICE_ID, LAST_SLICE_ID, slices_of
from server.store.tables import AllocationRow, MigSliceRow, NodeRow

if TYPE_CHECKING:  # for the annotation only: the store's module need not load with this one
    from server.store.database import Store


def _view(row: MigSliceRow, held_by: str | None) -> MigSlice:
    return MigSlice(node_id=row.node_id, id=row.id, gpu=row.gpu, profile=row.profile,
                    memory_gb=profile_named(row.profile).memory_gb, uuid=row.uuid, held_by=held_by,
                    created_by=row.created_by, created_at=row.created_at)


class MigSlices:
    """The store's MIG slices: read by anyone holding the store, written only under the placement lock."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def on_node(self, node_id: str) -> list[MigSlice]:
        with self._store.session() as s:
            self._node(s, node_id)
            return self._listed(s, node_id)

    def by_node(self) -> dict[str, list[MigSliceRow]]:
        """Every node's slices (`node list` shows them in place of their parents)."""
        with self._store.session() as s:
            return slices_of(s)

    def _listed(self, s: Session, node_id: str) -> list[MigSlice]:
        held = {gpu_index: copy_id for gpu_index, copy_id in s.execute(
            select(AllocationRow.gpu_index, AllocationRow.copy_id).where(AllocationRow.node_id == node_id))}
        return [_view(row, held.get(row.id)) for row in slices_of(s, NodeRow.id == node_id).get(node_id, [])]

    def create(self, node_id: str, request: MigSliceRequest, who: str) -> MigSlice:
        """Record a slice, or refuse in one line: no such node or GPU, not an H100 80GB, an unknown profile, the
        parent held by a copy (409), or a budget the GPU's slices would overrun."""
        try:
            profile = profile_named(request.profile)
        except ValueError as error:
            raise UserInputError(f"{str(error)[0].upper()}{str(error)[1:]}.") from None
        with self._store.placements.transaction() as s:
            node = self._node(s, node_id)
            parent = self._parent(node, request.gpu)
            holder = _holder(s, node_id, request.gpu)
            if holder is not None:
                raise ConflictError(f"GPU {request.gpu} on node {node_id} is held by copy {holder}; a GPU is sliced "
                                    f"only while no copy holds it.")
            if request.uuid is not None:
                _refuse_named_twice(s, request.uuid)
            existing = slices_of(s, NodeRow.id == node_id).get(node_id, [])
            refused = budget_refusal([profile_named(row.profile) for row in existing if row.gpu == request.gpu],
                                     profile)
            if refused is not None:
                raise UserInputError(f"GPU {request.gpu} on node {node_id} cannot take it: {refused}.")
            row = MigSliceRow(node_id=node_id, id=self._free_id(node, existing), gpu=request.gpu,
                              profile=profile.name, uuid=request.uuid or _simulated_uuid(parent),
                              created_by=who, created_at=time.time())
            s.add(row)
            placement_view.changed(s, [node_id])
            s.flush()
            return _view(row, None)

    def set_uuid(self, node_id: str, slice_id: int, uuid: str) -> MigSlice:
        """Name the instance made for a slice (the node agent, once `nvidia-smi mig` made it): placeable from now."""
        with self._store.placements.transaction() as s:
            row = self._slice(s, node_id, slice_id)
            if row.uuid == uuid:
                return _view(row, _holder(s, node_id, slice_id))
            holder = _holder(s, node_id, slice_id)
            if row.uuid is not None and holder is not None:  # its rank's CUDA_VISIBLE_DEVICES names the old one
                raise ConflictError(f"MIG slice {slice_id} on node {node_id} is named {row.uuid} and held by copy "
                                    f"{holder}; it is renamed only while no copy holds it.")
            _refuse_named_twice(s, uuid)
            row.uuid = uuid
            placement_view.changed(s, [node_id])
            return _view(row, _holder(s, node_id, slice_id))

    def delete(self, node_id: str, slice_id: int) -> MigSliceDeleted:
        """Remove a slice no copy holds (409, naming the copy, while one does): its parent takes copies again once it
        has no slice left."""
        with self._store.placements.transaction() as s:
            self._slice(s, node_id, slice_id)
            holder = _holder(s, node_id, slice_id)
            if holder is not None:
                raise ConflictError(f"MIG slice {slice_id} on node {node_id} is held by copy {holder}; stop or move "
                                    f"that copy first.")
            s.execute(delete(MigSliceRow).where(MigSliceRow.node_id == node_id, MigSliceRow.id == slice_id))
            placement_view.changed(s, [node_id])
        return MigSliceDeleted(node_id=node_id, id=slice_id)

    @staticmethod
    def _node(s: Session, node_id: str) -> NodeRow:
        node = s.get(NodeRow, node_id)
        if node is None:
            raise NotFoundError(f"No node '{node_id[:128]}'. Run `berth node list` to see the nodes.")
        return node

    def _slice(self, s: Session, node_id: str, slice_id: int) -> MigSliceRow:
        self._node(s, node_id)
        row = s.get(MigSliceRow, (node_id, slice_id))
        if row is None:
            raise NotFoundError(f"No MIG slice {slice_id} on node {node_id}. `berth node mig list {node_id}` lists "
                                f"its slices.")
        return row

    @staticmethod
    def _parent(node: NodeRow, index: int) -> dict[str, Any]:
        gpu = next((g for g in node.gpus or [] if int(g.get("index", -1)) == index), None)
        if gpu is None:
            raise NotFoundError(f"Node {node.id} has no GPU {index}. `berth node list` shows its GPUs.")
        name, memory_gb = str(gpu.get("name", "")), float(gpu.get("memory_gb", 0))
        if not h100_shaped(name, memory_gb):
            raise UserInputError(f"GPU {index} on node {node.id} is a {name[:64] or 'GPU'} with {memory_gb:g} GB; MIG "
                                 f"slices are made only of an H100 80GB.")
        return gpu

    @staticmethod
    def _free_id(node: NodeRow, existing: list[MigSliceRow]) -> int:
        taken = {row.id for row in existing} | {int(g.get("index", -1)) for g in node.gpus or []}
        free = next((i for i in range(FIRST_SLICE_ID, LAST_SLICE_ID + 1) if i not in taken), None)
        if free is None:
            raise ConflictError(f"Node {node.id} has {len(existing)} MIG slices, as many as it may hold.")
        return free


def _holder(s: Session, node_id: str, index: int) -> str | None:
    """The copy holding GPU (or slice) `index` on the node, fenced or not."""
    return s.scalar(select(AllocationRow.copy_id).where(AllocationRow.node_id == node_id,
                                                        AllocationRow.gpu_index == index))


def _refuse_named_twice(s: Session, uuid: str) -> None:
    """Two slices of one name would be one device placement hands out twice: refused (409), naming the other."""
    other = s.scalars(select(MigSliceRow).where(MigSliceRow.uuid == uuid)).first()
    if other is not None:
        raise ConflictError(f"{uuid} already names MIG slice {other.id} on node {other.node_id}.")


def _simulated_uuid(parent: dict[str, Any]) -> str | None:
    """A simulated GPU's slice gets a made-up UUID of the right form (its engine reads no CUDA); a real GPU's slice is
    pending until the instance is made and named (`mig_apply`, or `--uuid` for one made by hand)."""
    return f"MIG-{uuids.uuid4()}" if parent.get("simulated") else None

