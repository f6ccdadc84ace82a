"""Placement's per-process view of the nodes (server/store/placement_view.py): a view made stale by another API
process's reservation, release, drain or heartbeat is caught inside the next reservation's locked transaction and
re-reads only the nodes that changed; a node going quiet is offline at once; and two API processes racing
reservations and releases on one store never hold one GPU twice. On SQLite and on a real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError

from berth.contracts import NodeHolding, ReserveRequest
from berth.security import Cipher
from server.store.database import Store
from server.store.tables import AllocationRow

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[3]


def _inventory(gpus: int, **extra: object) -> dict[str, object]:
    return {"address": "127.0.0.1", "engine": "simulator",
            "gpus": [{"index": i, "name": "Simulated GPU 80GB", "memory_gb": 80} for i in range(gpus)], **extra}


def _open(url: str, tmp_path: Path) -> Store:
    """One API process's store: its own engine, lock and view over the shared database."""
    return Store(url, Cipher.load_or_create(tmp_path / "keys"))


def _reserve(store: Store, copy_id: str, gpus: int = 1) -> list[tuple[str, tuple[int, ...]]] | None:
    result = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=copy_id, nodes=1, gpus_per_node=gpus))
    return None if result.placement is None else [(r.node_id, r.gpus) for r in result.placement.ranks]


def _held(store: Store) -> list[tuple[str, int]]:
    held = [(a.node_id, a.gpu_index) for a in store.placements.allocations()]
    assert len(held) == len(set(held)), "a GPU is held twice"
    return sorted(held)


def test_another_processes_writes_are_seen_and_only_the_changed_nodes_reread(store_url: str, tmp_path: Path) -> None:
    first, second = _open(store_url, tmp_path), _open(store_url, tmp_path)
    for index in range(20):
        first.heartbeat_node(f"n{index:02d}", _inventory(2), port_start=30000 + index * 100)
    assert _reserve(first, "wf.a", gpus=2) == [("n00", (0, 1))]  # pack: the first node, whole
    assert first.placements.view.reads == 20
    assert _reserve(second, "wf.b", gpus=1) == [("n01", (0,))]
    # The first process's view still has n01 empty: its next reservation sees the generation moved, re-reads n01
    # alone, and packs onto n01's other GPU rather than taking GPU 0 a second time.
    assert _reserve(first, "wf.c", gpus=1) == [("n01", (1,))]
    assert first.placements.view.reads == 21
    # Its own reservations it keeps, re-reading nothing.
    assert _reserve(first, "wf.d", gpus=2) == [("n02", (0, 1))]
    assert _reserve(first, "wf.e", gpus=2) == [("n03", (0, 1))]
    assert first.placements.view.reads == 21
    # A release by the other process frees n00 for the first.
    second.placements.release("wf.a")
    assert _reserve(first, "wf.f", gpus=2) == [("n00", (0, 1))]
    # A heartbeat that taints n04 and a drain of n05, both through the other process.
    second.heartbeat_node("n04", _inventory(2, taints=["gpu=broken"]), port_start=30400)
    second.set_draining("n05", True)
    assert _reserve(first, "wf.g", gpus=2) == [("n06", (0, 1))]
    # A heartbeat saying only "alive" changes nothing a view holds.
    reads = first.placements.view.reads
    second.heartbeat_node("n07", _inventory(2), port_start=30700)
    assert _reserve(first, "wf.h", gpus=2) == [("n07", (0, 1))]
    assert first.placements.view.reads == reads  # not n07
    # A node whose agent leaves is offline for the next reservation, with no generation moved.
    second.heartbeat_node("n08", _inventory(2, leaving=True), port_start=30800)
    assert _reserve(first, "wf.i", gpus=2) == [("n09", (0, 1))]
    assert len(_held(first)) == 14  # n00–n03, n06, n07, n09: two GPUs each


def test_a_gpu_fenced_by_a_heartbeat_elsewhere_is_not_placed_on(store_url: str, tmp_path: Path) -> None:
    first, second = _open(store_url, tmp_path), _open(store_url, tmp_path)
    first.heartbeat_node("n0", _inventory(2), port_start=30000, held=[])
    assert _reserve(first, "wf.a") == [("n0", (0,))]
    # A restarted agent's first heartbeat to the other process: a live orphan holds GPU 1 (fenced anew).
    second.heartbeat_node("n0", _inventory(2), port_start=30000,
                          held=[NodeHolding(owner="wf.orphan", gpus=(1,), ports=(30001,))])
    assert _reserve(first, "wf.b") is None
    # The orphan gone, the node says so: GPU 1 is free again for the first process.
    second.heartbeat_node("n0", _inventory(2), port_start=30000, held=[])
    assert _reserve(first, "wf.b") == [("n0", (1,))]
    assert _held(first) == [("n0", 0), ("n0", 1)]


def test_a_write_that_skipped_the_generation_fails_one_reservation_and_the_view_reads_afresh(
        store_url: str, tmp_path: Path) -> None:
    store = _open(store_url, tmp_path)
    store.heartbeat_node("n0", _inventory(2), port_start=30000)
    assert _reserve(store, "wf.a") == [("n0", (0,))]
    with store.session() as s:  # behind placement's back: no generation moved (as no code of Berth's does)
        s.add(AllocationRow(node_id="n0", gpu_index=1, copy_id="wf.sneaked"))
    with pytest.raises(IntegrityError):  # the (node, GPU) constraint: the GPU is not held twice
        _reserve(store, "wf.b")
    assert _reserve(store, "wf.b") is None  # the failed transaction dropped the view: read again, n0 is full
    assert _held(store) == [("n0", 0), ("n0", 1)]


RACER = """
import json, pathlib, sys, time
from berth.contracts import ReserveRequest
from berth.security import Cipher
from server.store.database import Store
url, keys, name, go = sys.argv[1:5]
store = Store(url, Cipher.load_or_create(pathlib.Path(keys)))
deadline = time.monotonic() + 60
while not pathlib.Path(go).exists():  # both processes start their race together
    assert time.monotonic() < deadline, "never told to go"
    time.sleep(0.01)
held = []
for i in range(60):
    copy_id = f"{name}.copy-{i}"
    result = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=copy_id, nodes=1, gpus_per_node=1))
    if result.placement is not None:
        held.append(copy_id)
    if i % 3 == 2 and held and i < 45:  # give one back now and then: the other process's view must see it freed
        store.placements.release(held.pop(0))
print(json.dumps(held))
"""


def test_two_api_processes_racing_never_hold_one_gpu_twice(store_url: str, tmp_path: Path) -> None:
    store = _open(store_url, tmp_path)
    for index in range(3):
        store.heartbeat_node(f"n{index}", _inventory(4), port_start=30000 + index * 100)
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    racers = [subprocess.Popen([sys.executable, "-c", RACER, store_url, str(tmp_path / "keys"), name, str(go)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
              for name in ("api-1", "api-2")]
    done, beats = threading.Event(), [0]

    def heartbeat() -> None:
        """A third writer all along: heartbeats that change what placement reads (the cached models), with and without
        fencing's reconcile, so views re-read nodes mid-race and heartbeats and reservations take the lock in turn."""
        while not done.is_set():
            index = beats[0] % 3
            models = ["ab" * 32] if beats[0] % 2 else []
            store.heartbeat_node(f"n{index}", _inventory(4, models=models), port_start=30000 + index * 100,
                                 held=[] if beats[0] % 4 < 2 else None)
            beats[0] += 1

    beating = threading.Thread(target=heartbeat)
    go.touch()
    beating.start()
    held = []
    try:
        for racer in racers:
            out, err = racer.communicate(timeout=150)
            assert racer.returncode == 0, err[-2000:]  # a stale view would have met the (node, GPU) constraint here
            held += json.loads(out)
    finally:
        done.set()
        beating.join(timeout=30)
    assert beats[0] > 0
    assert sorted(a.copy_id for a in store.placements.allocations()) == sorted(held)
    # The last 15 reservations of each give nothing back: every GPU is taken at the end, each once (a view blind
    # to a GPU the other process freed would have left it idle).
    assert len(_held(store)) == len(held) == 12
