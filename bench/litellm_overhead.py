"""The full request path (endpoint proxy + the per-model LiteLLM proxy, caller assertion included) vs
stock LiteLLM alone in front of the same simulator replica, in the same run. Prints JSON.

Target (issue 6): full-path p50 at concurrency 1 ≤ 1.15 × stock LiteLLM's. Also req/s at
concurrency 8 and CPU per streamed chunk (endpoint proxy + Berth's LiteLLM vs stock LiteLLM).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from bench.common import cpu_seconds, emit, summary
from bench.proxy_overhead import LONG_REPLY, latencies, start_litellm, stream_chunks, throughput
from berth.processes import stop_group_sync
from stack.driver import RunningStack, free_port_base, litellm_bin, service_record


def main() -> None:
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
        # Interleaved rounds: the shared cores' load drifts; alternating keeps the comparison fair.
        full_ms: list[float] = []
        stock_ms: list[float] = []
        for _ in range(3):
            full_ms += asyncio.run(latencies(full_url, auth, 100))
            stock_ms += asyncio.run(latencies(stock_url, stock_auth, 100))
        proxy_pid = next(c["pid"] for c in stack.info["children"] if c["name"] == "proxy")
        # The node agent's record: a front that was its standby keeps the standby's command line.
        berth_litellm = int(service_record(stack.state_dir, workflow_id)["pid"])
        before = cpu_seconds(proxy_pid) + cpu_seconds(berth_litellm)
        full_chunks = asyncio.run(stream_chunks(full_url, auth, 5))
        full_cpu = (cpu_seconds(proxy_pid) + cpu_seconds(berth_litellm) - before) * 1000 / max(full_chunks, 1)
        before = cpu_seconds(stock.pid)
        stock_chunks = asyncio.run(stream_chunks(stock_url, stock_auth, 5))
        stock_cpu = (cpu_seconds(stock.pid) - before) * 1000 / max(stock_chunks, 1)
        full_rps = asyncio.run(throughput(full_url, auth, 8, 6))
        stock_rps = asyncio.run(throughput(stock_url, stock_auth, 8, 6))
        full, plain = summary(full_ms), summary(stock_ms)
        emit("litellm_overhead", {
            "latency_ms_concurrency_1": {"full_path": full, "stock_litellm": plain},
            "p50_ratio_full_vs_stock": full["p50"] / plain["p50"],
            "rps_concurrency_8": {"full_path": full_rps, "stock_litellm": stock_rps},
            "cpu_ms_per_streamed_chunk": {"full_path": full_cpu, "stock_litellm": stock_cpu},
            "streamed_chunks": {"full_path": full_chunks, "stock_litellm": stock_chunks},
            "targets": {"p50_ratio_full_vs_stock": 1.15},
        })
    finally:
        if stock is not None:
            stop_group_sync(stock.pid, 10)
        stack.stop()


if __name__ == "__main__":
    main()
