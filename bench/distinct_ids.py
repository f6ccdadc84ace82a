"""What a stream of distinct `x-session-id` / `x-project-id` values costs the endpoint proxy's limits
(issue 29, finding 11): `--ids` admits and finishes, each with a new session and project, all within one
minute (nothing swept by time), session and project limits set. Prints the memory Python holds (tracemalloc)
after each tenth and the counters kept: flat once the counters reach their cap. Prints JSON."""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc
from typing import Any

from bench.common import emit
from berth.contracts import limit_policy_from
from gateway.endpoint.counters import MAX_WINDOWED, MemoryCounters
from gateway.endpoint.limits import Asked, Limiter

POLICY = {"session": {"requests_per_minute": 100, "tokens_per_minute": 10_000},
          "project": {"requests_per_minute": 100}}


async def run(ids: int) -> dict[str, Any]:
    counters = MemoryCounters()
    limiter = Limiter(limit_policy_from(POLICY, "the bench"), counters, clock=lambda: 1_800_000_000.0)
    tracemalloc.start()
    samples: list[dict[str, float]] = []
    started = time.perf_counter()
    for i in range(ids):
        ticket = await limiter.admit(Asked(endpoint_id="ep", session=f"s{i:07d}", project=f"p{i:07d}"))
        await ticket.finish(10)
        if (i + 1) % max(1, ids // 10) == 0:
            current, peak = tracemalloc.get_traced_memory()
            samples.append({"ids": i + 1, "current_mib": round(current / 2**20, 1), "peak_mib": round(peak / 2**20, 1),
                            "counters": counters.size()})
    tracemalloc.stop()
    return {"ids": ids, "max_windowed": MAX_WINDOWED, "samples": samples,
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ids", type=int, default=1_000_000)
    emit("distinct_ids", asyncio.run(run(parser.parse_args().ids)))


if __name__ == "__main__":
    main()
