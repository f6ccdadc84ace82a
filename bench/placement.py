"""Placement of 10,000 pending copies on 10,000 simulated 8-GPU nodes (issue 36; issue 5 measured 1,000 on 1,000):
the scheduler's decisions (`server.inventory.Inventory.place`, beside `server.scheduler.place`'s scan of every node
on the first copies) and atomic reservations in the store (`Placements.reserve`), on SQLite and, with `--postgres`,
on a PostgreSQL started in a temp dir (stack/postgres.py, the store tests' own).

Targets: the scheduler's decisions ≤ 1 s for all copies; `reserve` ≤ 2 ms a copy at p50 at 10,000 nodes on SQLite.
`--baseline DIR` runs the same benchmarks on another checkout's code (e.g. /work/main) in the same run: the scheduler's
on all the copies, the store's on `--baseline-copies` copies (an old reserve read every node per copy). Prints JSON:

    PYTHONPATH=. .venv/bin/python -m bench.placement [--nodes N] [--copies N] [--postgres] [--baseline /work/main]

`--sites` measures what sites and failure domains cost `reserve` (issue 36): the same copies on plain nodes and on
nodes with sites and domains, in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import emit, summary
from berth.contracts import ReserveRequest, SitePlacement
from berth.security import Cipher
from server.scheduler import Demand, GpuView, NodeView, place
from server.store.database import Store

GPUS = 8
SCAN_COPIES = 300  # the scan of every node is timed on the first copies only: 10,000 of them would take a minute
CACHED = "ab" * 32  # a model digest cached on one node in a hundred; one copy in five prefers it
SCHEDULER_TARGET_S = 1.0
RESERVE_TARGET_MS = 2.0
POOL_COPIES = 10  # `--sites`: copies per pool


def demands(copies: int) -> list[Demand]:
    """A fixed mix: mostly single-node copies of 1–8 GPUs, one in ten spanning 2–4 nodes."""
    rng = random.Random(5)
    out = []
    for _ in range(copies):
        model = CACHED if rng.random() < 0.2 else None
        if rng.random() < 0.1:
            out.append(Demand(nodes=rng.choice([2, 3, 4]), gpus_per_node=rng.choice([4, 8]), gpu_memory_gb=60,
                              prefer_model=model))
        else:
            out.append(Demand(nodes=1, gpus_per_node=rng.choice([1, 2, 4, 8]), gpu_memory_gb=30, prefer_model=model))
    return out


def node_id(index: int) -> str:
    return f"node-{index:05d}"


def cached_here(index: int) -> bool:
    return index % 100 == 7


def _per_copy_ms(latencies: list[float]) -> dict[str, float]:
    return {k: round(v * 1000, 3) if k != "n" else v for k, v in summary(latencies).items()}


def bench_scheduler(nodes: int, copies: int) -> dict[str, object]:
    """Each decision applied to the cluster before the next, as the store does; the scan beside the index."""
    from server.inventory import Inventory  # here: a checkout from before the index (issue 36) has none

    gpus = tuple(GpuView(i, 80.0) for i in range(GPUS))
    views = [NodeView(id=node_id(i), ready=True, gpus=gpus,
                      models=frozenset({CACHED}) if cached_here(i) else frozenset()) for i in range(nodes)]
    figures: dict[str, object] = {}
    for name, count in (("inventory", copies), ("scan", min(copies, SCAN_COPIES))):
        inventory, by_id = Inventory(views), {v.id: v for v in views}
        latencies, placed = [], 0
        started = time.perf_counter()
        for demand in demands(count):
            t0 = time.perf_counter()
            decision = inventory.place(demand) if name == "inventory" else place(demand, list(by_id.values()))
            latencies.append(time.perf_counter() - t0)
            for chosen_id, chosen in decision.ranks:
                view = by_id[chosen_id] = replace(by_id[chosen_id], busy_gpus=by_id[chosen_id].busy_gpus | set(chosen))
                inventory.put(view)
            placed += decision.blocked_reason is None
        figures[name] = {"copies": count, "decisions_s": round(sum(latencies), 3),
                         "with_updates_s": round(time.perf_counter() - started, 3), "placed": placed,
                         "per_copy_ms": _per_copy_ms(latencies)}
    return figures


def site_labels(index: int) -> dict[str, str]:
    """`--sites`: two sites, node by node, each of three failure domains (issue 36)."""
    site = "eu-west" if index % 2 else "us-east"
    return {"berth.site": site, "berth.failure-domain": f"{site}-rack-{index // 2 % 3}"}


def site_request(index: int) -> tuple[str, SitePlacement | None]:
    """`--sites`: the copies in pools of POOL_COPIES, every other pool with Residency=eu: (workflow id, its rules)."""
    pool = index // POOL_COPIES
    return f"pool-{pool}", SitePlacement(residency="eu") if pool % 2 == 0 else None


def bench_store(url: str, directory: Path, nodes: int, copies: int, sites: bool = False) -> dict[str, object]:
    # Nodes heartbeat once here, so "offline" must not arrive while the benchmark runs.
    store = Store(url, Cipher.load_or_create(directory / "keys"), node_offline_after_s=3600)
    started = time.perf_counter()
    for index in range(nodes):
        inventory = {"address": "127.0.0.1", "engine": "simulator", "models": [CACHED] if cached_here(index) else [],
                     "gpus": [{"index": i, "name": "Simulated GPU 80GB", "memory_gb": 80.0} for i in range(GPUS)],
                     "labels": site_labels(index) if sites else {}}
        store.heartbeat_node(node_id(index), inventory, port_start=20000 + (index % 400) * 100)
    heartbeats_s = time.perf_counter() - started
    latencies, cpu, placed = [], [], 0
    started = time.perf_counter()
    for index, demand in enumerate(demands(copies)):
        workflow_id, rules = site_request(index) if sites else ("bench", None)
        t0, c0 = time.perf_counter(), time.process_time()
        result = store.placements.reserve(ReserveRequest(
            workflow_id=workflow_id, copy_id=f"{workflow_id}.copy-{index}", nodes=demand.nodes,
            gpus_per_node=demand.gpus_per_node, gpu_memory_gb=demand.gpu_memory_gb, prefer_model=demand.prefer_model,
            sites=rules))
        latencies.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        placed += result.placement is not None
    total = time.perf_counter() - started
    allocations = [(a.node_id, a.gpu_index) for a in store.placements.allocations()]
    assert len(allocations) == len(set(allocations)), "a GPU was double-booked"
    store.engine.dispose()
    return {"database": url.split(":", 1)[0], "nodes": nodes, "copies": copies, "heartbeats_s": round(heartbeats_s, 1),
            "total_s": round(total, 3), "placed": placed, "first_copy_ms": round(latencies[0] * 1000, 1),
            "per_copy_ms": _per_copy_ms(latencies[1:] or latencies),
            # This process's CPU (on SQLite the database's work too; not PostgreSQL's server): on a shared machine
            # the steadier figure.
            "cpu_per_copy_ms": _per_copy_ms(cpu[1:] or cpu)}


def bench_baseline(checkout: Path, nodes: int, copies: int, part: str = "--store-only") -> dict[str, Any]:
    """The store benchmark (or with `--scheduler-only` the scheduler's) on another checkout's server code, in a
    child process (its bench/results untouched)."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run([sys.executable, __file__, part, "--nodes", str(nodes), "--copies", str(copies)],
                         env=env, cwd=checkout, capture_output=True, text=True, timeout=3600, check=True).stdout
    return {"checkout": str(checkout), **json.loads(out)}


@contextmanager
def postgres(directory: Path) -> Iterator[str]:
    from stack.postgres import remove_instance, start_instance  # the store tests' throwaway PostgreSQL

    instance = start_instance(directory)
    try:
        yield instance.create_database()
    finally:
        remove_instance(instance, directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--copies", type=int, default=10_000)
    parser.add_argument("--postgres", action="store_true", help="the store benchmark on PostgreSQL too")
    parser.add_argument("--baseline", type=Path, help="a checkout whose reserve to measure beside this one's")
    parser.add_argument("--baseline-copies", type=int, default=50)
    parser.add_argument("--store-only", action="store_true", help="SQLite reservations only, JSON on stdout")
    parser.add_argument("--scheduler-only", action="store_true", help="the scheduler's decisions only, JSON on stdout")
    parser.add_argument("--sites", action="store_true", help="SQLite reservations only: plain nodes, then nodes in "
                        "two sites and six failure domains with pools of 10 copies, every other one Residency=eu")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="berth-bench-placement-"))
    if args.sites:
        plain = bench_store(f"sqlite:///{directory / 'plain.db'}", directory, args.nodes, args.copies)
        sited = bench_store(f"sqlite:///{directory / 'sites.db'}", directory, args.nodes, args.copies, sites=True)
        emit("placement_sites", {"plain": plain, "sites": sited, "p50_ratio": round(
            sited["per_copy_ms"]["p50"] / plain["per_copy_ms"]["p50"], 2),  # type: ignore[index]
            "load_average": os.getloadavg()[0]})
        return
    if args.store_only:
        print(json.dumps(bench_store(f"sqlite:///{directory / 'berth.db'}", directory, args.nodes, args.copies)))
        return
    if args.scheduler_only:
        print(json.dumps(bench_scheduler(args.nodes, args.copies)))
        return
    scheduler = bench_scheduler(args.nodes, args.copies)
    result: dict[str, Any] = {"nodes": args.nodes, "gpus_per_node": GPUS, "copies": args.copies,
                              "scheduler": scheduler}
    if args.baseline:
        # The baseline's scheduler on all the copies, as this checkout's: the index must not have got slower.
        result["scheduler_baseline"] = bench_baseline(args.baseline, args.nodes, args.copies, "--scheduler-only")
        result["store_sqlite_baseline"] = bench_baseline(args.baseline, args.nodes, args.baseline_copies)
    result["store_sqlite"] = bench_store(f"sqlite:///{directory / 'berth.db'}", directory, args.nodes, args.copies)
    if args.postgres:
        with postgres(directory) as url:
            result["store_postgresql"] = bench_store(url, directory, args.nodes, args.copies)
    decisions = scheduler["inventory"]["decisions_s"]  # type: ignore[index]
    reserve_p50 = result["store_sqlite"]["per_copy_ms"]["p50"]
    result["targets"] = {"scheduler_s": SCHEDULER_TARGET_S, "reserve_p50_ms": RESERVE_TARGET_MS,
                         "met": decisions <= SCHEDULER_TARGET_S and reserve_p50 <= RESERVE_TARGET_MS}
    result["load_average"] = os.getloadavg()[0]
    emit("placement", result)


if __name__ == "__main__":
    main()
