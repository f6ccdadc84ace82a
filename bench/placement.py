"""Placement of 1,000 pending copies on 1,000 simulated 8-GPU nodes: the pure scheduler
(`server.scheduler.place`) and atomic reservations on the SQLite store (`Placements.reserve`).

Target (issue 5): ≤ 1 s for all 1,000 with the scheduler. Prints JSON.
"""

from __future__ import annotations

import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.common import emit, summary
from berth.contracts import ReserveRequest
from berth.security import Cipher
from server.scheduler import Demand, GpuView, NodeView, place
from server.store.database import Store

NODES = 1000
GPUS = 8
COPIES = 1000


def demands() -> list[Demand]:
    """A fixed mix: mostly single-node copies of 1–8 GPUs, one in ten spanning 2–4 nodes."""
    rng = random.Random(5)
    out = []
    for _ in range(COPIES):
        if rng.random() < 0.1:
            out.append(
                Demand(nodes=rng.choice([2, 3, 4]), gpus_per_node=rng.choice([4, 8]), gpu_memory_gb=60)
            )
        else:
            out.append(Demand(nodes=1, gpus_per_node=rng.choice([1, 2, 4, 8]), gpu_memory_gb=30))
    return out


def bench_scheduler() -> dict[str, object]:
    gpus = tuple(GpuView(i, 80.0) for i in range(GPUS))
    views = {f"node-{i:04d}": NodeView(id=f"node-{i:04d}", ready=True, gpus=gpus) for i in range(NODES)}
    latencies, placed = [], 0
    started = time.perf_counter()
    for demand in demands():
        t0 = time.perf_counter()
        decision = place(demand, list(views.values()))
        for node_id, chosen in decision.ranks:
            view = views[node_id]
            views[node_id] = replace(view, busy_gpus=view.busy_gpus | frozenset(chosen))
        latencies.append(time.perf_counter() - t0)
        placed += decision.blocked_reason is None
    total = time.perf_counter() - started
    return {
        "total_s": round(total, 3),
        "placed": placed,
        "per_copy_ms": {k: round(v * 1000, 3) if k != "n" else v for k, v in summary(latencies).items()},
    }


def bench_store() -> dict[str, object]:
    directory = Path(tempfile.mkdtemp(prefix="berth-bench-placement-"))
    # Nodes heartbeat once here, so "offline" must not arrive while the benchmark runs.
    store = Store(
        f"sqlite:///{directory / 'berth.db'}",
        Cipher.load_or_create(directory / "keys"),
        node_offline_after_s=3600,
    )
    inventory = {
        "address": "127.0.0.1",
        "engine": "simulator",
        "gpus": [{"index": i, "name": "Simulated GPU 80GB", "memory_gb": 80.0} for i in range(GPUS)],
    }
    for index in range(NODES):
        store.heartbeat_node(f"node-{index:04d}", inventory, port_start=20000 + index * 100)
    latencies, placed = [], 0
    started = time.perf_counter()
    for index, demand in enumerate(demands()):
        t0 = time.perf_counter()
        result = store.placements.reserve(
            ReserveRequest(
                workflow_id="bench",
                copy_id=f"bench.copy-{index}",
                nodes=demand.nodes,
                gpus_per_node=demand.gpus_per_node,
                gpu_memory_gb=demand.gpu_memory_gb,
            )
        )
        latencies.append(time.perf_counter() - t0)
        placed += result.placement is not None
    total = time.perf_counter() - started
    allocations = [(a.node_id, a.gpu_index) for a in store.placements.allocations()]
    assert len(allocations) == len(set(allocations)), "a GPU was double-booked"
    return {
        "total_s": round(total, 3),
        "placed": placed,
        "per_copy_ms": {k: round(v * 1000, 3) if k != "n" else v for k, v in summary(latencies).items()},
    }


def main() -> None:
    scheduler = bench_scheduler()
    store = bench_store()
    emit(
        "placement",
        {
            "nodes": NODES,
            "gpus_per_node": GPUS,
            "copies": COPIES,
            "scheduler": scheduler,
            "store_sqlite": store,
            "target_s": 1.0,
            "meets_target": float(scheduler["total_s"]) <= 1.0,
        },
    )  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
