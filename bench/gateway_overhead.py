"""The discovering gateway (`berth gateway`) vs direct to the replica vs the endpoint proxy, same run.

The same non-streamed one-token chat completion, concurrency 1, loopback, engine simulator at an
unlimited token rate; the three paths take turns in rounds so drift in the shared machine's load
falls on all of them alike. Target (issue 7): the gateway adds ≤ 1 ms at p50. Prints JSON.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import emit, summary
from bench.proxy_overhead import BODY, latencies
from berth.processes import stop_group_sync
from stack.driver import RunningStack, free_port_base, start_gateway, wait_for

ROUNDS = 6
PER_ROUND = 100
TARGET_ADDED_P50_MS = 1.0


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="berth-bench-gateway-"))
    stack = RunningStack(state_dir=workdir / "state", port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB",
                         extra_env={"BERTH_SIM_TOKENS_PER_SECOND": "0", "BERTH_SIM_MAX_NUM_SEQS": "256"}).start()
    gateway = None
    try:
        workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false")
        copy = stack.describe(workflow_id)["replicas"][0]
        replica, direct_auth = copy["url"], {"Authorization": f"Bearer {stack.replica_key(copy['copy_id'])}"}
        endpoint = stack.endpoint(workflow_id)
        gateway, gateway_url = start_gateway(stack, stack.token)
        wait_for(lambda: any(m["id"] == BODY["model"] for m in
                             httpx.get(gateway_url + "/v1/models", timeout=5).json()["data"]), 30,
                 "the gateway to discover the pool")
        paths = {
            "direct": (replica + "/v1/chat/completions", direct_auth),
            "endpoint_proxy": (endpoint["url"] + "/v1/chat/completions",
                               {"Authorization": f"Bearer {stack.token_for(endpoint['id'])}"}),
            "gateway": (gateway_url + "/v1/chat/completions", {}),
        }
        measured: dict[str, list[float]] = {name: [] for name in paths}
        started = time.monotonic()
        for _ in range(ROUNDS):
            for name, (url, headers) in paths.items():
                measured[name] += asyncio.run(latencies(url, headers, PER_ROUND))
        stats = {name: summary(values) for name, values in measured.items()}
        added = {name: stats[name]["p50"] - stats["direct"]["p50"] for name in ("endpoint_proxy", "gateway")}
        added_p99 = {name: stats[name]["p99"] - stats["direct"]["p99"] for name in ("endpoint_proxy", "gateway")}
        stack.cli("workflow", "stop", workflow_id)
    finally:
        if gateway is not None:
            stop_group_sync(gateway.pid, 10)
        stack.stop()
    emit("gateway_overhead", {
        "request": "non-streamed chat completion, max_tokens 1, concurrency 1, loopback",
        "rounds": ROUNDS, "requests_per_round_per_path": PER_ROUND,
        "seconds": round(time.monotonic() - started, 1),
        "latency_ms": stats, "added_p50_ms": added, "added_p99_ms": added_p99,
        "target_added_p50_ms": TARGET_ADDED_P50_MS,
        "meets_target": added["gateway"] <= TARGET_ADDED_P50_MS,
    })


if __name__ == "__main__":
    main()
