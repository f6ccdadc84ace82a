"""The routes table's cost to the API: CPU per `GET /v1/internal/routes`, which every endpoint proxy reads each second
(and again while it holds requests), through the real app in process (httpx's ASGI transport, an administrator's
token, one app for every request; SQLite), for clusters of E endpoints with C published copies each. "CPU" is the
process's (its threads, and SQLite's work, included; the in-process client's share too, the same for every size).

`--baseline DIR` measures another checkout (e.g. `git archive REV | tar -x -C DIR`) against this one in the same run:
`--runs` processes of each, alternating, each importing its own checkout's code; each size's figure is the median of
its rounds, and the median of the runs is reported. Prints JSON.

    PYTHONPATH=. .venv/bin/python -m bench.routes_table [--baseline DIR [--runs N]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = ((1, 1, 200), (20, 3, 100), (200, 4, 20))  # endpoints, copies each, calls a round
ROUNDS = 5


def measure(endpoints: int, copies: int, calls: int) -> float:
    """The median over ROUNDS of the CPU microseconds per call, for a fresh store of that size."""
    import httpx

    from berth.security import Identity
    from catalog.entry import load_catalog
    from catalog.render import render, resolve_values
    from server.app import build_context, create_app
    from server.submission import new_rows

    admin = Identity(user="admin", groups=("default",), org="default", admin=True)
    context = build_context(Path(tempfile.mkdtemp(prefix="berth-bench-routes-")) / "c", "127.0.0.1:1")
    entry = load_catalog()["GPT-OSS 20B"]
    definition = render(entry, resolve_values(entry, {"Proxy": "false"}))
    for e in range(endpoints):
        row, endpoint = new_rows(entry, definition, admin, f"wf-{e}")
        context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
        for c in range(copies):
            context.store.upsert_replica(f"wf-{e}", endpoint.id, f"wf-{e}.copy-{c}",
                                         f"http://127.0.0.1:{20000 + e * 10 + c}", True)
    transport = httpx.ASGITransport(app=create_app(context))
    headers = {"Authorization": f"Bearer {context.signing.api_token(admin)}"}

    async def rounds() -> list[float]:
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            first = await client.get("/v1/internal/routes")
            assert first.status_code == 200 and len(first.json()["endpoints"]) == endpoints, first.text[:300]
            per_call = []
            for _ in range(ROUNDS):
                began = time.process_time()
                for _ in range(calls):
                    await client.get("/v1/internal/routes")
                per_call.append((time.process_time() - began) / calls * 1e6)
            return per_call
    return statistics.median(asyncio.run(rounds()))


def measure_here() -> dict[str, float]:
    return {f"{e}x{c}": round(measure(e, c, calls)) for e, c, calls in SIZES}


def against_baseline(baseline: Path, runs: int) -> dict[str, Any]:
    here = Path(__file__).resolve().parent.parent
    figures: dict[str, dict[str, list[float]]] = {"baseline": {}, "this": {}}
    for _ in range(runs):
        for side, checkout in (("baseline", baseline), ("this", here)):
            out = subprocess.run([sys.executable, str(here / "bench" / "routes_table.py"), "--child"],
                                 env={**os.environ, "PYTHONPATH": str(checkout)}, cwd=checkout, capture_output=True,
                                 check=True, timeout=900).stdout
            for size, value in json.loads(out).items():
                figures[side].setdefault(size, []).append(value)
    medians = {side: {size: statistics.median(values) for size, values in sizes.items()}
               for side, sizes in figures.items()}
    return {"runs": runs, "cpu_us_per_call": figures, "median": medians,
            "change": {size: round(medians["this"][size] / medians["baseline"][size] - 1, 3)
                       for size in medians["this"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout, measured against this one")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_here()))
        return
    from bench.common import emit

    if args.baseline is not None:
        emit("routes_table_against_baseline", against_baseline(args.baseline.resolve(), args.runs))
        return
    emit("routes_table", {"cpu_us_per_call": measure_here(), "load_average": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
