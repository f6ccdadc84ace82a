"""Routing quality through the endpoint proxy: replicas of unequal speed (least_queue vs round_robin), and with
`--load shared-prefix` a shared-prefix load (prefix_affinity vs round_robin, bench/shared_prefix_load.py).

One `Proxy=false` pool of three copies behind the real endpoint proxy: two on a node whose simulator
generates FAST tokens/s and one on a second node agent whose simulator is SLOW_FACTOR times slower
(a rank inherits its node agent's environment; a pool's own ExtraEnv is the same for every copy).
Every copy runs `--max-num-seqs 4`, so a replica sent more than it can serve queues requests, as
vLLM does. The same seeded open-loop (Poisson) arrivals are replayed against the pool started with
each policy, at two loads: light, and loaded (round robin then sends the slow copy ~90 % of its
capacity). Target (issue 7): least_queue p99 ≤ 0.6 × round_robin p99 at the loaded level. `--policies a,b`
runs only those (round_robin always, the baseline); by default every registered policy. Shared-prefix load:
one node of three GPUs whose simulator prices prefill and keeps a prefix cache; target (issue 36): prefix_affinity
TTFT p90 ≤ 0.5 × round_robin's. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import shared_prefix_load
from bench.common import emit, summary
from berth.processes import stop_group_sync
from gateway.edge.routing import POLICIES as REGISTERED
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
# round_robin and least_queue are the comparison the target is about; the others show the rest.
POLICIES = ("round_robin", *sorted(set(REGISTERED) - {"round_robin"}))
TARGET_RATIO = 0.6
PREFIX_TARGET_RATIO = 0.5
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


def start_pool(stack: RunningStack, policy: str, extra: str = "") -> tuple[str, list[dict[str, Any]]]:
    """A Proxy=false pool of three copies routed by `policy`, once all three are ready: its id and copies."""
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=3,MaxReplicas=3,DrainGrace=1,"
                f"Scope=user,RoutingPolicy={policy}{extra}")

    def three_ready() -> list[dict[str, Any]] | None:
        ready = [r for r in stack.describe(workflow_id)["replicas"] if r["status"] == "ready"]
        return ready if len(ready) == 3 else None

    return workflow_id, wait_for(three_ready, 90, "3 ready copies")


def stop_pool(stack: RunningStack, workflow_id: str) -> None:
    stack.cli("workflow", "stop", workflow_id)
    wait_for(lambda: gpus_held(stack, workflow_id) == 0, 60, "the pool's GPUs to be released")


def run_policy(stack: RunningStack, policy: str) -> dict[str, Any]:
    workflow_id, copies = start_pool(stack, policy, f",ExtraArgs='--max-num-seqs {MAX_NUM_SEQS}'")
    try:
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
        stop_pool(stack, workflow_id)


def unequal_speeds(policies: list[str]) -> None:
    state = Path(tempfile.mkdtemp(prefix="berth-bench-routing-")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="2x80GB",
                         extra_env={"BERTH_SIM_TOKENS_PER_SECOND": str(FAST_TOKENS_PER_S)}).start()
    slow_node = None
    try:
        slow_node = add_node_agent(stack, "node-slow", "1x80GB",
                                   {"BERTH_SIM_TOKENS_PER_SECOND": str(FAST_TOKENS_PER_S / SLOW_FACTOR)})
        results = {policy: run_policy(stack, policy) for policy in policies}
    finally:
        if slow_node is not None:  # before the stack: its shutdown talks to Temporal
            stop_group_sync(slow_node.pid, 10)
        stack.stop()
    ratios = {policy: {load: round(results[policy][load]["latency_s"]["p99"]
                                   / results["round_robin"][load]["latency_s"]["p99"], 3) for load in LOADS}
              for policy in policies if policy != "round_robin"}
    emit("routing_quality", {
        "pool": f"3 copies, --max-num-seqs {MAX_NUM_SEQS}: 2 at {FAST_TOKENS_PER_S} tokens/s, 1 at "
                f"{FAST_TOKENS_PER_S / SLOW_FACTOR:g} tokens/s; {TOKENS}-token replies, non-streamed",
        "load": {name: f"open loop, Poisson, {rate:g} req/s for {SECONDS} s" for name, rate in LOADS.items()},
        "results": results,
        "p99_over_round_robin_p99": ratios,
        "target_least_queue_ratio_loaded": TARGET_RATIO,
        "meets_target": "least_queue" in ratios and ratios["least_queue"]["loaded"] <= TARGET_RATIO,
    })


def shared_prefix(policies: list[str], words: int) -> None:
    load = shared_prefix_load
    state = Path(tempfile.mkdtemp(prefix="berth-bench-prefix-")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="3x80GB",
                         extra_env=load.copy_env(words)).start()
    results: dict[str, Any] = {}
    try:
        for policy in policies:
            workflow_id, copies = start_pool(stack, policy)
            try:
                endpoint = stack.endpoint(workflow_id)
                url, token = endpoint["url"] + "/v1/chat/completions", stack.token_for(endpoint["id"])
                time.sleep(2.5)  # the proxy has the three copies and a scrape of each
                ttft = asyncio.run(load.first_token_times(url, token, MODEL,
                                                          load.requests(load.RATE, load.SECONDS, seed=7), words))
                hits = [prefix_hits(stack, c) for c in copies]
                results[policy] = {"ttft_s": summary(ttft),
                                   "prefix_cache_hit_share": round(sum(h for h, _ in hits)
                                                                   / max(1.0, sum(q for _, q in hits)), 3)}
            finally:
                stop_pool(stack, workflow_id)
    finally:
        stack.stop()
    ratios = {policy: round(results[policy]["ttft_s"]["p90"] / results["round_robin"]["ttft_s"]["p90"], 3)
              for policy in policies if policy != "round_robin"}
    emit("routing_quality_shared_prefix", {
        "pool": f"3 copies; prefill {load.PREFILL_TOKENS_PER_S} tokens/s per copy, one prompt at a time; a prefix "
                f"cache of {load.cache_blocks(words)} 16-token blocks ({load.CACHE_DOCUMENTS} documents) per copy",
        "load": f"open loop, Poisson, {load.RATE:g} req/s for {load.SECONDS} s; each request one of "
                f"{load.DOCUMENTS} {words}-token documents (seeded) plus its own question; streamed, "
                f"{load.REPLY_TOKENS}-token replies",
        "results": results,
        "ttft_p90_over_round_robin_p90": ratios,
        "target_prefix_affinity_ratio": PREFIX_TARGET_RATIO,
        "meets_target": "prefix_affinity" in ratios and ratios["prefix_affinity"] <= PREFIX_TARGET_RATIO,
    })


def prefix_hits(stack: RunningStack, copy: dict[str, Any]) -> tuple[float, float]:
    """The copy's prefix cache hits and queries, in tokens, since it started."""
    figures = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 0.0}
    for line in stack.copy_metrics(copy).splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in figures:
            figures[name] += float(line.rsplit(" ", 1)[1])
    return figures["vllm:prefix_cache_hits_total"], figures["vllm:prefix_cache_queries_total"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--load", choices=("unequal-speeds", "shared-prefix"), default="unequal-speeds")
    parser.add_argument("--policies", default="", help="comma-separated; round_robin is always run (the baseline)")
    parser.add_argument("--document-tokens", type=int, default=shared_prefix_load.PREFIX_WORDS,
                        help="shared-prefix load: each document's length (its prefill, when not cached)")
    arguments = parser.parse_args()
    default = POLICIES if arguments.load == "unequal-speeds" else ("round_robin", "least_queue", "prefix_affinity")
    asked = [p for p in arguments.policies.split(",") if p] or list(default)
    unknown = sorted(set(asked) - set(REGISTERED))
    if unknown:
        parser.error(f"unknown policies: {', '.join(unknown)}; choose from {', '.join(sorted(REGISTERED))}")
    policies = ["round_robin", *[p for p in asked if p != "round_robin"]]
    if arguments.load == "unequal-speeds":
        unequal_speeds(policies)
    else:
        shared_prefix(policies, arguments.document_tokens)


if __name__ == "__main__":
    main()
