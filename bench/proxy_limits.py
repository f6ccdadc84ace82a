"""The keyed, limited endpoint proxy for bench/proxy_overhead.py (issue 15): stacks whose proxy reads a limits
file setting every field of LimitPolicy (values too high ever to refuse), counters in memory or shared through
a redis-server started for the run, and a Berth API key (`bk_…`, its own limits set too) to call them with."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.audit_writer import bench_enqueue
from bench.limits_admit import POLICY
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
    token: Target  # an endpoint token through the same limits: what the key itself adds, beside it

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
                        keyed_no_quota=(url, _keyed_headers(keys[1]), stack.verify),
                        token=(url, _keyed_headers(stack.token_for(endpoint["id"])), stack.verify))


def _create_key(stack: RunningStack, endpoint_id: str, name: str, limits: dict[str, int | None]) -> str:
    """A key of the stack's user (the endpoint's owner) through the API, `POST /v1/keys`: its plaintext."""
    created = stack.api("POST", "/v1/keys", json={"name": name, "endpoint_id": endpoint_id, **limits})
    created.raise_for_status()
    return str(created.json()["key"])


def _keyed_headers(key: str) -> dict[str, str]:
    # x-project-id and x-session-id: without them a request is not counted in those two scopes.
    return {"Authorization": f"Bearer {key}", "x-project-id": "bench", "x-session-id": "bench-session"}


def audit_cost() -> dict[str, Any]:
    """bench/audit_writer.py's per-request figure: the proxy's audit records on a request's path, in-process."""
    started = time.perf_counter()
    figures = asyncio.run(bench_enqueue())
    return {**figures, "measured_in_s": round(time.perf_counter() - started, 1)}
