"""A rolling update of a 2-copy pool (MaxContextSize 2048 → 4096) under steady load through the endpoint
proxy, on simulated nodes: requests failed during the update (goal 0) and the p99 latency while copies
are replaced vs steady state before it, measured in the same run (goal ≤ 1.2×). Then the same for
blue-green. Prints JSON.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.common import emit, percentile
from stack.driver import RunningStack, free_port_base

MODEL = "Qwen/Qwen3-0.6B"
CLIENTS = 4
STEADY_S = 20.0


class Load:
    """CLIENTS closed-loop clients; each answer's latency is kept with the time it ended."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token, self.done = url, token, threading.Event()
        self.samples: list[tuple[float, float]] = []  # (ended at, seconds)
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENTS)]

    def _run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {self.token}"}) as client:
            while not self.done.is_set():
                started = time.monotonic()
                try:
                    response = client.post(self.url + "/v1/chat/completions", json=body)
                    ok = response.status_code == 200
                except httpx.HTTPError as error:
                    ok, response = False, None
                    self.failures.append(type(error).__name__)
                ended = time.monotonic()
                if ok:
                    self.samples.append((ended, ended - started))
                elif response is not None:
                    self.failures.append(str(response.status_code))

    def between(self, start: float, end: float) -> list[float]:
        return [s for at, s in self.samples if start <= at <= end]


def one_update(stack: RunningStack, strategy: str) -> dict[str, object]:
    workflow_id = stack.start_entry("vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=2,"
                                            "MaxReplicas=3,DrainGrace=10,Scope=user,MaxContextSize=2048")
    endpoint = stack.endpoint(workflow_id)
    load = Load(endpoint["url"], stack.token_for(endpoint["id"]))
    for thread in load.threads:
        thread.start()
    time.sleep(STEADY_S)  # a benchmark's steady-state window (measured, not waited on)
    steady_end = time.monotonic()
    failures_before = len(load.failures)
    stack.cli("workflow", "update", workflow_id, "--values", "MaxContextSize=4096", "--strategy", strategy,
              "--min-ready-seconds", "2", "--rollback-window-seconds", "2", "--no-wait")
    while (stack.describe(workflow_id).get("rollout") or {}).get("phase") != "complete":
        time.sleep(0.5)
    switch_end = time.monotonic()
    load.done.set()
    for thread in load.threads:
        thread.join(timeout=60)
    steady = load.between(steady_end - STEADY_S, steady_end)
    during = load.between(steady_end, switch_end)
    stack.cli("workflow", "stop", workflow_id)
    p99_steady, p99_during = percentile(steady, 99), percentile(during, 99)
    return {"strategy": strategy, "failed_during_update": len(load.failures) - failures_before,
            "requests_during_update": len(during), "update_s": round(switch_end - steady_end, 1),
            "p99_steady_ms": round(1000 * p99_steady, 2), "p99_during_ms": round(1000 * p99_during, 2),
            "p99_ratio": round(p99_during / p99_steady, 3) if p99_steady else None}


def main() -> None:
    state = Path(tempfile.mkdtemp(prefix="berth-bench-")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="4x80GB",
                         extra_env={"BERTH_SIM_STARTUP_DELAY": "1", "BERTH_SIM_TOKENS_PER_SECOND": "200"}).start()
    try:
        runs = [one_update(stack, strategy) for strategy in ("rolling", "blue-green")]
    finally:
        stack.stop()
    emit("rollout_under_load", {"runs": runs, "goal": {"failed_during_update": 0, "p99_ratio_max": 1.2}})


if __name__ == "__main__":
    main()
