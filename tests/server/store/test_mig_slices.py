"""MIG slices under racing placements (server/store/mig_slices.py), on SQLite and PostgreSQL: two API processes
reserve one-GPU copies while an administrator deletes the slices. Every slice and GPU is held by one copy at most, a
slice is deleted only while no copy holds it, and no copy holds a slice that is gone."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from berth.contracts import ReserveRequest
from berth.contracts.mig import MigSliceRequest
from berth.errors import ConflictError
from berth.security import Cipher
from server.store.database import Store
from server.store.mig_slices import MigSlices

pytestmark = pytest.mark.timeout(120)
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_gb": 85.5}
COPIES = 16


def test_racing_reservations_and_deletions_never_share_or_orphan_a_slice(store_url: str, tmp_path: Path) -> None:
    first = Store(store_url, Cipher.load_or_create(tmp_path / "keys"))
    second = Store(store_url, Cipher.load_or_create(tmp_path / "keys"))
    first.heartbeat_node("node-h", {"address": "127.0.0.1", "engine": "vllm",
                                    "gpus": [{"index": i, **H100} for i in range(2)]}, 30000)
    made = [MigSlices(first).create("node-h", MigSliceRequest(gpu=0, profile="1g", uuid=f"MIG-{n:08x}-0000-4000-8000-"
                                                              f"000000000000"), "admin") for n in range(7)]
    doomed = made[:6]  # the seventh stays: a GPU with no slice left would take copies whole again
    barrier = threading.Barrier(COPIES + len(doomed))

    def reserve(index: int) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
        barrier.wait()
        store = (first, second)[index % 2]
        result = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=f"wf.copy-{index}", nodes=1,
                                                         gpus_per_node=1))
        return None if result.placement is None else (result.placement.ranks[0].gpus, result.placement.ranks[0].devices)

    def delete(slice_id: int) -> bool:
        barrier.wait()
        try:
            MigSlices(second).delete("node-h", slice_id)
            return True
        except ConflictError:
            return False

    with ThreadPoolExecutor(COPIES + len(doomed)) as pool:
        placed = [future.result() for future in [pool.submit(reserve, i) for i in range(COPIES)]
                  + [pool.submit(delete, s.id) for s in doomed]]
    copies = [p for p in placed[:COPIES] if p is not None]
    deleted = {s.id for s, gone in zip(doomed, placed[COPIES:], strict=True) if gone}
    held = [(a.node_id, a.gpu_index) for a in first.placements.allocations()]
    assert len(held) == len(set(held)) == len(copies)  # one copy a GPU or slice
    slice_ids = {s.id for s in made}
    on_slices = {gpu for (gpus, _devices) in copies for gpu in gpus if gpu in slice_ids}
    assert not on_slices & deleted  # a deleted slice was held by none when it went, and none took it after
    assert on_slices == {s.id for s in MigSlices(first).on_node("node-h") if s.held_by}
    # Each copy on a slice is named by that slice's UUID; the whole GPU 1 by its index; the parent GPU 0 by no one.
    by_id = {s.id: s.uuid for s in made}
    for gpus, devices in copies:
        assert devices == ((by_id[gpus[0]],) if gpus[0] in slice_ids else ())
    assert (0,) not in [gpus for gpus, _devices in copies]
    assert len(copies) == 1 + len(slice_ids) - len(deleted)  # GPU 1 and every slice left, each taken once
