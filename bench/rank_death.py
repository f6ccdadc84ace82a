"""A rank of a 2-node copy dies (SIGKILL) → the copy is fully stopped (every rank process gone, every
GPU released) → its replacement serves (ReplaceFailedCopies), on simulated nodes.

Targets (issue 5): stopped ≤ 3 s; replacement serving ≤ 3 s plus the simulator's start-up (0 s here).
Prints JSON.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import emit, summary
from berth.processes import pid_alive
from stack.driver import RunningStack, free_port_base, rank_record

RUNS = 5


def wait_copy_stopped(stack: RunningStack, copy_id: str, leader_pid: int) -> None:
    """Until the copy's leader process is gone and no GPU is allocated to the copy."""
    while True:
        gpus = [
            g
            for n in stack.api("GET", "/v1/nodes").json()
            for g in n["gpus"]
            if g["allocated_to"] == copy_id
        ]
        if not pid_alive(leader_pid) and not gpus:
            return
        time.sleep(0.02)


def wait_replacement_serving(stack: RunningStack, workflow_id: str, copy_id: str, url: str, token: str) -> None:
    """Until the endpoint answers a chat and another copy than `copy_id` is ready."""
    while True:
        response = httpx.post(
            url + "/v1/chat/completions",
            timeout=10,
            headers={"Authorization": f"Bearer {token}"},
            json={
                "model": "nvidia/some-model",
                "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}],
            },
        )
        replicas = stack.describe(workflow_id)["replicas"]
        if response.status_code == 200 and any(
            r["copy_id"] != copy_id and r["status"] == "ready" for r in replicas
        ):
            return
        time.sleep(0.02)


def main() -> None:
    state = Path(tempfile.mkdtemp(prefix="berth-bench-")) / "state"
    stack = RunningStack(
        state_dir=state,
        port_base=free_port_base(),
        nodes=2,
        simulate_gpus="4x80GB",
        extra_env={"BERTH_SIM_STARTUP_DELAY": "0"},
    ).start()
    stopped, serving = [], []
    try:
        workflow_id = stack.start_entry(
            "vLLM", f"Model=hf://nvidia/some-model,Nodes=2,GpusPerNode=4,ReplaceFailedCopies={RUNS}"
        )
        endpoint = stack.endpoint(workflow_id)
        token = stack.token_for(endpoint["id"])
        for _ in range(RUNS):
            copy_id = next(
                r["copy_id"] for r in stack.describe(workflow_id)["replicas"] if r["status"] == "ready"
            )
            leader, follower = rank_record(state, copy_id, 0), rank_record(state, copy_id, 1)
            started = time.monotonic()
            os.kill(int(follower["pid"]), signal.SIGKILL)
            wait_copy_stopped(stack, copy_id, int(leader["pid"]))
            stopped.append(time.monotonic() - started)
            wait_replacement_serving(stack, workflow_id, copy_id, endpoint["url"], token)
            serving.append(time.monotonic() - started)
        stack.cli("workflow", "stop", workflow_id)
    finally:
        stack.stop()
    stop_stats, serve_stats = summary(stopped), summary(serving)
    emit(
        "rank_death",
        {
            "runs": RUNS,
            "copy": "Nodes=2,GpusPerNode=4 (simulator, start-up 0 s)",
            "rank_death_to_copy_stopped_s": stop_stats,
            "rank_death_to_replacement_serving_s": serve_stats,
            "targets": {"stopped_s": 3.0, "replacement_s": 3.0},
            "meets_targets": stop_stats["p50"] <= 3.0 and serve_stats["p50"] <= 3.0,
        },
    )


if __name__ == "__main__":
    main()
