"""Routing quality with replicas of unequal speed: least_queue vs round_robin through the endpoint proxy.

One `Proxy=false` pool of three copies behind the real endpoint proxy: two on a node whose simulator
generates FAST tokens/s and one on a second node agent whose simulator is SLOW_FACTOR times slower
(a rank inherits its node agent's environment; a pool's own ExtraEnv is the same for every copy).
Every copy runs `--max-num-seqs 4`, so a replica sent more than it can serve queues requests, as
vLLM does. The same seeded open-loop (Poisson) arrivals are replayed against the pool started with
each policy (all four), at two loads: light, and loaded (round robin then sends the slow copy ~90 % of its
capacity). Target (issue 7): least_queue p99 ≤ 0.6 × round_robin p99 at the loaded level. Prints JSON.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import emit, summary
from berth.processes import stop_group_sync
from stack.driver import RunningStack, add_node_agent, free_port_base, gpus_held, wait_for

MODEL = "Qwen/Qwen3-0.6B"
FAST_TOKENS_PER_S = 200
SLOW_FACTOR = 5
MAX_NUM_SEQS = 4
TOKENS = 16  # per reply (ignore_eos): 0.08 s on a fast copy, 0.4 s on the slow one
SECONDS = 30
# Requests/s offered to the pool. Capacity: 4 / 0.08 = 50 per fast copy, 4 / 0.4 = 10 on the slow one;
# round robin gives the slow copy a third: 4/s (40 % busy) at the light load, 9/s (90 %) loaded.
LOADS = {"light": 12.0, "loaded": 27.0}
# round_robin and least_queue are the comparison the target is about; the other two show the rest.
POLICIES = ("round_robin", "least_queue", "lowest_ttft", "most_free_kv")
TARGET_RATIO = 0.6
BODY = {"model": MODEL, "max_tokens": TOKENS, "ignore_eos": True, "messages": [{"role": "user", "content": "hi"}]}


def arrivals(rate: float, seconds: float, seed: int) -> list[float]:
    """Poisson arrival offsets (s): the same list for every policy."""
    rng, at = random.Random(seed), 0.0
    out: list[float] = []
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            return out
        out.append(at)


async def open_loop(url: str, token: str, offsets: list[float]) -> list[float]:
    """Send a request at each offset regardless of the answers still pending; latencies in seconds."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=120, limits=limits, headers={"Authorization": f"Bearer {token}"}) as client:
        async def one(offset: float, start: float) -> None:
            await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
            sent = time.monotonic()
            response = await client.post(url, json=BODY)
            response.raise_for_status()
            latencies.append(time.monotonic() - sent)

        for _ in range(10):  # warm the connections up
            (await client.post(url, json=BODY)).raise_for_status()
        start = time.monotonic() + 0.2
        await asyncio.gather(*(one(offset, start) for offset in offsets))
    return latencies


def served(stack: RunningStack, copy: dict[str, Any]) -> float:
    text = stack.copy_metrics(copy)  # with the copy's key: its port answers only Berth
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


def run_policy(stack: RunningStack, policy: str) -> dict[str, Any]:
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=3,MaxReplicas=3,DrainGrace=1,"
                f"Scope=user,RoutingPolicy={policy},ExtraArgs='--max-num-seqs {MAX_NUM_SEQS}'")
    try:
        def three_ready() -> list[dict[str, Any]] | None:
            ready = [r for r in stack.describe(workflow_id)["replicas"] if r["status"] == "ready"]
            return ready if len(ready) == 3 else None

        copies = wait_for(three_ready, 90, "3 ready copies")
        slow = [c for c in copies if "node-slow" in c["nodes"]]
        assert len(slow) == 1, f"expected one copy on node-slow: {copies}"
        endpoint = stack.endpoint(workflow_id)
        url, token = endpoint["url"] + "/v1/chat/completions", stack.token_for(endpoint["id"])
        time.sleep(2.5)  # the proxy has the three copies and a scrape of each
        result: dict[str, Any] = {}
        for index, (load, rate) in enumerate(LOADS.items()):
            before = {c["copy_id"]: served(stack, c) for c in copies}
            latencies = asyncio.run(open_loop(url, token, arrivals(rate, SECONDS, seed=index)))
            share_slow = (served(stack, slow[0]) - before[slow[0]["copy_id"]]) / max(
                1.0, sum(served(stack, c) - before[c["copy_id"]] for c in copies))
            result[load] = {"latency_s": summary(latencies), "share_to_slow_copy": round(share_slow, 3)}
            time.sleep(3)  # queues empty, scrapes settle
        return result
    finally:
        stack.cli("workflow", "stop", workflow_id)
        wait_for(lambda: gpus_held(stack, workflow_id) == 0, 60, "the pool's GPUs to be released")


def main() -> None:
    state = Path(tempfile.mkdtemp(prefix="berth-bench-routing-")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="2x80GB",
                         extra_env={"BERTH_SIM_TOKENS_PER_SECOND": str(FAST_TOKENS_PER_S)}).start()
    slow_node = None
    try:
        slow_node = add_node_agent(stack, "node-slow", "1x80GB",
                                   {"BERTH_SIM_TOKENS_PER_SECOND": str(FAST_TOKENS_PER_S / SLOW_FACTOR)})
        results = {policy: run_policy(stack, policy) for policy in POLICIES}
    finally:
        if slow_node is not None:  # before the stack: its shutdown talks to Temporal
            stop_group_sync(slow_node.pid, 10)
        stack.stop()
    ratios = {policy: {load: round(results[policy][load]["latency_s"]["p99"]
                                   / results["round_robin"][load]["latency_s"]["p99"], 3) for load in LOADS}
              for policy in POLICIES if policy != "round_robin"}
    emit("routing_quality", {
        "pool": f"3 copies, --max-num-seqs {MAX_NUM_SEQS}: 2 at {FAST_TOKENS_PER_S} tokens/s, 1 at "
                f"{FAST_TOKENS_PER_S / SLOW_FACTOR:g} tokens/s; {TOKENS}-token replies, non-streamed",
        "load": {name: f"open loop, Poisson, {rate:g} req/s for {SECONDS} s" for name, rate in LOADS.items()},
        "results": results,
        "p99_over_round_robin_p99": ratios,
        "target_least_queue_ratio_loaded": TARGET_RATIO,
        "meets_target": ratios["least_queue"]["loaded"] <= TARGET_RATIO,
    })


if __name__ == "__main__":
    main()
