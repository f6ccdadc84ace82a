"""The full request path (endpoint proxy + the per-model LiteLLM proxy, caller assertion included) vs
stock LiteLLM alone in front of the same simulator replica, in the same run. Prints JSON.

Targets (issue 33): req/s at concurrency 8 ≥ 1.0 × stock LiteLLM's (the median ratio of rounds that
alternate between the two) and p50 at concurrency 1 ≤ 1.05 × stock's (requests sent to each in turn): the
drifting load of a shared machine weighs on both alike. Beside them, each process's CPU per request over the
throughput rounds (the endpoint proxy, Berth's LiteLLM and the API, which appends the proxy's audit records;
stock LiteLLM), and CPU per streamed chunk. Stock LiteLLM runs as its documentation configures a vLLM server
(bench/proxy_overhead.py `start_litellm`). `--rounds N`: throughput rounds each (default 3).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.common import cpu_seconds, emit, summary
from bench.proxy_overhead import interleaved, rps, start_litellm, stream_chunks
from bench.sim_targets import LONG_REPLY
from berth.processes import stop_group_sync
from stack.driver import RunningStack, free_port_base, litellm_bin, service_record

CONCURRENCY = 8
ROUND_S = 6.0
LATENCY_REQUESTS = 300


def _cpu_per_request(pids: dict[str, int], url: str, headers: dict[str, str]) -> tuple[float, dict[str, float]]:
    """req/s over one round, and each process's CPU µs per request in it."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    rate = asyncio.run(rps(url, headers, CONCURRENCY, ROUND_S))
    requests = max(rate * ROUND_S, 1.0)
    return rate, {name: (cpu_seconds(pid) - before[name]) * 1e6 / requests for name, pid in pids.items()}


def _median_cpu(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(one[name] for one in rounds) for name in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    if not litellm_bin():
        raise SystemExit("no litellm executable (set BERTH_LITELLM_BIN)")
    workdir = Path(tempfile.mkdtemp(prefix="berth-bench-litellm-"))
    simulator = {"BERTH_SIM_TOKENS_PER_SECOND": "0", "BERTH_SIM_REPLY": LONG_REPLY,
                 "BERTH_SIM_MAX_NUM_SEQS": "256"}
    stack = RunningStack(state_dir=workdir / "state", port_base=free_port_base(), nodes=1,
                         simulate_gpus="1x80GB", extra_env=simulator).start()
    stock = None
    try:
        workflow_id = stack.start_entry("GPT-OSS 20B")  # Proxy=true: endpoint proxy → LiteLLM → replica
        copy = stack.describe(workflow_id)["replicas"][0]
        replica, replica_key = copy["url"], stack.replica_key(copy["copy_id"])
        endpoint = stack.endpoint(workflow_id)
        auth = {"Authorization": f"Bearer {stack.token_for(endpoint['id'])}"}
        full_url = endpoint["url"] + "/v1/chat/completions"
        stock, stock_base = start_litellm(replica, workdir, replica_key)
        stock_url = stock_base + "/v1/chat/completions"
        stock_auth = {"Authorization": "Bearer sk-bench-master"}
        children = {str(child["name"]): int(child["pid"]) for child in stack.info["children"] if child.get("pid")}
        # The node agent's record: a front that was its standby keeps the standby's command line.
        berth_litellm = int(service_record(stack.state_dir, workflow_id)["pid"])
        full_pids = {"proxy": children["proxy"], "berth_litellm": berth_litellm, "api": children["api"]}
        stock_pids = {"stock_litellm": stock.pid}
        # Interleaved throughout: the shared cores' load drifts; alternating keeps the comparison fair. Latency:
        # one request to each in turn; throughput: rounds in turn.
        latency = asyncio.run(interleaved({"full": (full_url, auth, True), "stock": (stock_url, stock_auth, True)},
                                          LATENCY_REQUESTS))
        full_ms, stock_ms = latency["full"], latency["stock"]
        full_rps: list[float] = []
        stock_rps: list[float] = []
        full_cpu: list[dict[str, float]] = []
        stock_cpu: list[dict[str, float]] = []
        for _ in range(rounds):
            rate, cpu = _cpu_per_request(full_pids, full_url, auth)
            full_rps.append(rate)
            full_cpu.append(cpu)
            rate, cpu = _cpu_per_request(stock_pids, stock_url, stock_auth)
            stock_rps.append(rate)
            stock_cpu.append(cpu)
        before = sum(cpu_seconds(pid) for pid in full_pids.values())
        full_chunks = asyncio.run(stream_chunks(full_url, auth, 5))
        full_chunk_cpu = (sum(cpu_seconds(pid) for pid in full_pids.values()) - before) * 1000 / max(full_chunks, 1)
        before = cpu_seconds(stock.pid)
        stock_chunks = asyncio.run(stream_chunks(stock_url, stock_auth, 5))
        stock_chunk_cpu = (cpu_seconds(stock.pid) - before) * 1000 / max(stock_chunks, 1)
        full, plain = summary(full_ms), summary(stock_ms)
        emit("litellm_overhead", {
            "latency_ms_concurrency_1": {"full_path": full, "stock_litellm": plain},
            "p50_ratio_full_vs_stock": statistics.median(full_ms) / statistics.median(stock_ms),
            "rps_concurrency_8": {"full_path": full_rps, "stock_litellm": stock_rps,
                                  "load_generator": "wrk" if shutil.which("wrk") else "httpx"},
            "rps_ratio_full_vs_stock": statistics.median(f / s for f, s in zip(full_rps, stock_rps, strict=True)),
            "cpu_us_per_request": {"full_path": _median_cpu(full_cpu), "stock_litellm": _median_cpu(stock_cpu)},
            "cpu_ms_per_streamed_chunk": {"full_path": full_chunk_cpu, "stock_litellm": stock_chunk_cpu},
            "streamed_chunks": {"full_path": full_chunks, "stock_litellm": stock_chunks},
            "targets": {"rps_ratio_full_vs_stock": 1.0, "p50_ratio_full_vs_stock": 1.05},
        })
    finally:
        if stock is not None:
            stop_group_sync(stock.pid, 10)
        stack.stop()


if __name__ == "__main__":
    main()
