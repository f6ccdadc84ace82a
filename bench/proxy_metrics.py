"""What the endpoint proxy's Prometheus figures cost (issue 19): two stacks side by side, one with
BERTH_METRICS=off, requests interleaved round by round (direct to each copy, through each proxy) so the shared
machine's noise weighs on all four alike. Targets: the added p50 with metrics on within 0.05 ms of metrics off,
and the metrics-on proxy's CPU per streamed chunk ≤ 0.02 ms. Prints JSON."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from bench.common import emit, summary
from bench.proxy_overhead import _cpu_per_chunk, interleaved
from bench.sim_targets import STACK_ENV, endpoint_target
from stack.driver import RunningStack, free_port_base

TARGETS = {"added_p50_ms_metrics_on_minus_off": 0.05, "cpu_ms_per_chunk_metrics_on": 0.02}


def _stack(root: Path, metrics: str) -> RunningStack:
    return RunningStack(state_dir=root / f"metrics-{metrics}", port_base=free_port_base(), nodes=1,
                        simulate_gpus="1x80GB", extra_env={**STACK_ENV, "BERTH_METRICS": metrics}).start()


def measure(root: Path, rounds: int = 400) -> dict[str, Any]:
    on = _stack(root, "on")
    try:
        off = _stack(root, "off")
        try:
            direct_on, proxy_on = endpoint_target(on)
            direct_off, proxy_off = endpoint_target(off)
            runs = asyncio.run(interleaved({"direct_on": direct_on, "proxy_on": proxy_on,
                                            "direct_off": direct_off, "proxy_off": proxy_off}, rounds))
            kept = {name: summary(values) for name, values in runs.items()}
            added_on = kept["proxy_on"]["p50"] - kept["direct_on"]["p50"]
            added_off = kept["proxy_off"]["p50"] - kept["direct_off"]["p50"]
            proxy_pid = next(c["pid"] for c in on.info["children"] if c["name"] == "proxy")
            cpu_ms, chunks = _cpu_per_chunk(proxy_pid, proxy_on)
        finally:
            off.stop()
    finally:
        on.stop()
    result = {"latency_ms_concurrency_1": kept, "added_p50_ms_metrics_on": added_on,
              "added_p50_ms_metrics_off": added_off, "added_p50_ms_metrics_on_minus_off": added_on - added_off,
              "cpu_ms_per_chunk_metrics_on": cpu_ms, "streamed_chunks": chunks, "targets": TARGETS}
    result["within_targets"] = (result["added_p50_ms_metrics_on_minus_off"] <= TARGETS[
        "added_p50_ms_metrics_on_minus_off"] and cpu_ms <= TARGETS["cpu_ms_per_chunk_metrics_on"])
    return result


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="berth-bench-metrics-") as root:
        emit("proxy_metrics", measure(Path(root)))


if __name__ == "__main__":
    main()
