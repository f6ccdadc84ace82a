"""The limits engine's cost (issue 15): µs per admit + finish with every limit set (seven scopes' RPM, TPM
and concurrency, the daily budgets, the size caps, the context check, shedding, a key's own limits), on
in-memory counters and, with `--redis-url` or a redis-server on PATH (started for the run on a free
loopback port), on counters shared through Redis: one round trip per admit and one per finish. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from typing import Any

from bench.common import emit
from berth.contracts import SCOPES, LimitPolicy
from berth.processes import free_port
from gateway.endpoint.counters import Counters, MemoryCounters
from gateway.endpoint.limits import Asked, Limiter

SCOPE_LIMITS = {"requests_per_minute": 10**9, "tokens_per_minute": 10**12, "concurrent": 10**6}
POLICY = LimitPolicy.model_validate({
    **{scope: SCOPE_LIMITS for scope in SCOPES}, "daily_tokens_per_user": 10**12, "daily_tokens_per_key": 10**12,
    "max_prompt_tokens": 100_000, "max_tokens": 100_000, "context_check": True, "shed_queue_depth": 100,
    "high_priority": True})  # every field set: a granted priority is one more check on the path
ASKED = Asked(endpoint_id="ep1", model="m1", user="alice", org="acme", groups=("g1",), project="p1",
              session="s1", key_id="k1", key_tokens_per_minute=10**12, key_max_concurrent=10**6,
              prompt_chars=2000, max_tokens=256, priority="normal", max_context=8192)
DEPTHS = (3.0, 5.0)


async def _per_admit(counters: Counters, rounds: int) -> dict[str, Any]:
    limiter = Limiter(POLICY, counters)
    for _ in range(min(rounds, 200)):  # warm: plan cached, script loaded
        await (await limiter.admit(ASKED, None, DEPTHS)).finish(10)
    admit_s = finish_s = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        ticket = await limiter.admit(ASKED, None, DEPTHS)
        middle = time.perf_counter()
        await ticket.finish(10)
        finish_s += time.perf_counter() - middle
        admit_s += middle - start
    return {"admit_us": round(admit_s / rounds * 1e6, 2), "finish_us": round(finish_s / rounds * 1e6, 2),
            "rounds": rounds}


async def _redis(url: str, rounds: int) -> dict[str, Any]:
    from gateway.endpoint.redis_counters import RedisCounters
    counters = RedisCounters(url, prefix=f"bench:{time.time_ns()}:")
    try:
        return {**await _per_admit(counters, rounds), "url": url}
    finally:
        await counters.close()


def start_redis(root: str) -> tuple[subprocess.Popen[bytes], str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--dir", root], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 20
    import redis
    while True:  # the condition: it answers PING
        try:
            redis.Redis.from_url(url).ping()
            return process, url
        except redis.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                return None
            time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--redis-url", help="an existing Redis (default: start redis-server if on PATH)")
    args = parser.parse_args()
    result: dict[str, Any] = {"checks_per_admit": 7 * 3 + 4, "memory": asyncio.run(_per_admit(MemoryCounters(),
                                                                                           args.rounds))}
    with tempfile.TemporaryDirectory(prefix="berth-bench-redis-") as root:
        started = None if args.redis_url else start_redis(root)
        url = args.redis_url or (started[1] if started else None)
        try:
            result["redis"] = asyncio.run(_redis(url, max(1, args.rounds // 10))) if url else "no redis-server"
        finally:
            if started:
                started[0].kill()
                started[0].wait()
    emit("limits_admit", result)


if __name__ == "__main__":
    main()
