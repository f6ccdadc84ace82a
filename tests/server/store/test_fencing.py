"""Fencing in the store: a lost rank's GPUs and ports stay reserved after its copy's release until its node
reports the process gone; a restarted node's first heartbeat re-fences what a live orphan holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.contracts import NodeHolding, ReserveRequest
from berth.errors import UserInputError
from berth.security import Cipher
from server.store.database import Store
from server.store.fencing import holdings

INVENTORY = {"address": "127.0.0.1", "engine": "simulator",
             "gpus": [{"index": 0, "name": "Simulated GPU 80GB", "memory_gb": 80}]}


def _store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'berth.db'}", Cipher.load_or_create(tmp_path / "keys"))
    store.heartbeat_node("n0", INVENTORY, port_start=30000, held=[])
    return store


def _place(store: Store, copy_id: str) -> tuple[int, ...] | None:
    result = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=copy_id, nodes=1, gpus_per_node=1))
    return None if result.placement is None else (result.placement.ranks[0].port,)


def test_a_fenced_copy_keeps_its_gpu_and_port_until_its_node_reports_the_process_gone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert _place(store, "wf.copy-0") == (30000,)
    store.placements.fence("wf.copy-0", ("n0",))
    store.placements.release("wf.copy-0")
    assert [(a.gpu_index, a.copy_id, a.fenced) for a in store.placements.allocations()] == [(0, "wf.copy-0", True)]
    assert _place(store, "wf.copy-1") is None  # the GPU is still the lost rank's
    # The node still runs the process: still fenced.
    store.heartbeat_node("n0", INVENTORY, port_start=30000,
                         held=[NodeHolding(owner="wf.copy-0", gpus=(0,), ports=(30000,))])
    assert _place(store, "wf.copy-1") is None
    # The node reports it gone: freed, and the next copy gets the GPU (and the port) again.
    store.heartbeat_node("n0", INVENTORY, port_start=30000, held=[])
    assert store.placements.allocations() == []
    assert _place(store, "wf.copy-1") == (30000,)


def test_a_live_orphan_the_store_released_is_fenced_by_the_first_heartbeat(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert _place(store, "wf.copy-0") == (30000,)
    store.placements.release("wf.copy-0")  # released without a fence (e.g. by a version before fencing)
    store.heartbeat_node("n0", INVENTORY, port_start=30000,
                         held=[NodeHolding(owner="wf.copy-0", gpus=(0,), ports=(30000,))])
    assert _place(store, "wf.copy-1") is None
    store.heartbeat_node("n0", INVENTORY, port_start=30000, held=[])
    assert _place(store, "wf.copy-1") == (30000,)


def test_a_heartbeat_without_holdings_leaves_fences_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _place(store, "wf.copy-0")
    store.placements.fence("wf.copy-0", ("n0",))
    store.placements.release("wf.copy-0")
    store.heartbeat_node("n0", INVENTORY, port_start=30000)  # an agent too old to report what it holds
    assert [a.copy_id for a in store.placements.allocations()] == ["wf.copy-0"]


def test_a_malformed_or_oversized_holdings_report_is_refused_in_one_line() -> None:
    assert holdings({}) is None  # an agent from before fencing
    with pytest.raises(UserInputError, match="at most 256 holdings"):
        holdings({"held": [{"owner": "c"}] * 257})
    with pytest.raises(UserInputError, match="'held' is malformed: String should have at most 160"):
        holdings({"held": [{"owner": "c" * 161}]})


# A copy publishes only while it holds its placement: a stop does not wait for a publish it cancelled, so
# that publish can reach the API after the stop's unpublish — it must write nothing, and a release takes
# the copy's record with it (tests/workflows/test_cancel_race.py drives the same race through the workflows).
def test_a_placed_copy_publishes_and_its_release_unpublishes_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    placed = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id="wf.copy-0", nodes=1, gpus_per_node=1))
    assert placed.placement is not None
    assert store.placements.publish("wf", "ep-1", "wf.copy-0", "http://127.0.0.1:30001", ready=True)
    assert [r.copy_id for r in store.replicas("ep-1")] == ["wf.copy-0"]
    store.placements.release("wf.copy-0")
    assert store.replicas("ep-1") == []


def test_a_publish_that_lands_after_the_release_writes_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id="wf.copy-0", nodes=1, gpus_per_node=1))
    store.remove_replica("wf.copy-0")  # the stop's unpublish
    store.placements.release("wf.copy-0")  # ... and its release
    assert not store.placements.publish("wf", "ep-1", "wf.copy-0", "http://127.0.0.1:30001", ready=True)
    assert store.replicas("ep-1") == []
