"""The keyed, limited endpoint proxy for bench/proxy_overhead.py (issue 15): stacks whose proxy reads a limits
file setting every field of LimitPolicy (values too high ever to refuse), counters in memory or shared through
a redis-server started for the run, and a Berth API key (`bk_…`, its own limits set too) to call them with."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.audit_writer import bench_enqueue
from bench.limits_admit import POLICY, start_redis
from stack.driver import RunningStack, free_port_base

Target = tuple[str, dict[str, str], "ssl.SSLContext | bool"]  # URL, headers, what the client trusts

# A key's own limits, set like the cluster's: high enough never to refuse, low enough to be counted.
KEY_LIMITS: dict[str, int | None] = {"request_quota": 10**9, "tokens_per_minute": 10**12, "max_concurrent": 10**6}


@dataclass
class LimitedStack:
    """A stack whose proxy admits under every limit; `direct` and `keyed` call the same copy."""

    stack: RunningStack
    direct: Target
    keyed: Target
    keyed_no_quota: Target  # the same key limits but the lifetime request quota (what its reservations cost)

    @property
    def proxy_pid(self) -> int:
        return int(next(c["pid"] for c in self.stack.info["children"] if c["name"] == "proxy"))


def write_limits_file(directory: Path) -> Path:
    """Every field of LimitPolicy set: the seven scopes' RPM, TPM and concurrency, the daily budgets, the size
    caps, the context check, the body limit and shedding (bench/limits_admit.py's policy)."""
    data = POLICY.model_dump(mode="json", by_alias=True)
    unset = [name for name, value in data.items() if value is None]
    if unset:
        raise RuntimeError(f"the bench's limits leave {unset} off")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "limits.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def start_limited(state_dir: Path, env: dict[str, str], limits_file: Path, redis_url: str | None) -> LimitedStack:
    """A stack with `BERTH_LIMITS_FILE` (and `BERTH_REDIS_URL`), a Proxy=false GPT-OSS 20B on it, and a key."""
    extra = {**env, "BERTH_LIMITS_FILE": str(limits_file), **({"BERTH_REDIS_URL": redis_url} if redis_url else {})}
    stack = RunningStack(state_dir=state_dir, port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB",
                         extra_env=extra).start()
    try:
        workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false")
        copy = stack.describe(workflow_id)["replicas"][0]
        endpoint = stack.endpoint(workflow_id)
        keys = [_create_key(stack, endpoint["id"], name, limits) for name, limits in
                (("bench", KEY_LIMITS), ("bench-no-quota", {**KEY_LIMITS, "request_quota": None}))]
    except BaseException:
        stack.stop()
        raise
    url = endpoint["url"] + "/v1/chat/completions"
    return LimitedStack(stack=stack,
                        direct=(copy["url"] + "/v1/chat/completions",
                                {"Authorization": f"Bearer {stack.replica_key(copy['copy_id'])}"}, True),
                        keyed=(url, _keyed_headers(keys[0]), stack.verify),
                        keyed_no_quota=(url, _keyed_headers(keys[1]), stack.verify))


def _create_key(stack: RunningStack, endpoint_id: str, name: str, limits: dict[str, int | None]) -> str:
    """A key of the stack's user (the endpoint's owner) through the API, `POST /v1/keys`: its plaintext."""
    created = stack.api("POST", "/v1/keys", json={"name": name, "endpoint_id": endpoint_id, **limits})
    created.raise_for_status()
    return str(created.json()["key"])


def _keyed_headers(key: str) -> dict[str, str]:
    # x-project-id and x-session-id: without them a request is not counted in those two scopes.
    return {"Authorization": f"Bearer {key}", "x-project-id": "bench", "x-session-id": "bench-session"}


@dataclass
class LimitedRun:
    """The run's limited stacks (in memory, through Redis) and the redis-server they share; stop() stops all."""

    memory: LimitedStack
    redis: LimitedStack | None
    redis_process: subprocess.Popen[bytes] | None
    redis_note: str

    def stop_redis(self) -> None:
        """The Redis stack and its server, once its latencies are taken: it should not weigh on the rest."""
        if self.redis is not None:
            self.redis.stack.stop()
            self.redis = None
        if self.redis_process is not None:
            self.redis_process.kill()
            self.redis_process.wait(timeout=10)
            self.redis_process = None

    def stop(self) -> None:
        self.stop_redis()
        self.memory.stack.stop()


def start_limited_run(workdir: Path, env: dict[str, str]) -> LimitedRun:
    """Two limited stacks side by side (not one restarted: their latencies are taken interleaved), the same
    limits file, one with in-memory counters and one with BERTH_REDIS_URL on a redis-server of its own."""
    limits_file = write_limits_file(workdir / "limits")
    memory = start_limited(workdir / "limited-memory", env, limits_file, None)
    started = start_redis(str(workdir))
    if started is None:
        return LimitedRun(memory, None, None, "no redis-server on PATH: the Redis figures are missing")
    try:
        redis = start_limited(workdir / "limited-redis", env, limits_file, started[1])
    except BaseException:
        started[0].kill()
        memory.stack.stop()
        raise
    return LimitedRun(memory, redis, started[0], f"a second stack, BERTH_REDIS_URL={started[1]}")


def latency_targets(run: LimitedRun) -> dict[str, Target]:
    """The limited stacks' targets for `interleaved()`: direct to each copy and through each keyed proxy."""
    targets = {"direct_limited": run.memory.direct, "keyed_memory": run.memory.keyed}
    if run.redis is not None:
        targets |= {"direct_redis": run.redis.direct, "keyed_redis": run.redis.keyed}
    return targets


def added_p50s(kept: dict[str, dict[str, float]]) -> dict[str, float]:
    """What each keyed proxy adds to the p50 of a direct call to its own copy; and the keyed, limited proxy's
    p50 less the plain one's (another stack: their copies' own p50s differ by run noise too)."""
    out = {"memory": kept["keyed_memory"]["p50"] - kept["direct_limited"]["p50"],
           "memory_over_plain_proxy": kept["keyed_memory"]["p50"] - kept["proxy"]["p50"]}
    if "keyed_redis" in kept:
        out["redis"] = kept["keyed_redis"]["p50"] - kept["direct_redis"]["p50"]
    return out


def audit_cost() -> dict[str, Any]:
    """bench/audit_writer.py's per-request figure: the proxy's audit records on a request's path, in-process."""
    started = time.perf_counter()
    figures = asyncio.run(bench_enqueue())
    return {**figures, "measured_in_s": round(time.perf_counter() - started, 1)}
