"""Wake from zero: a pool scaled to zero, then one request through the endpoint proxy, held until a
copy serves it — for a `Proxy=false` pool and for a `Proxy=true` one (through its LiteLLM proxy).
Reported per trial: that request's latency minus the simulator's
configured start-up delay, and where the time went, from the workflow's events and the rank's pidfile:

    request sent → `woken` (the proxy's wake signal reached the workflow)
                 → `copy_placed` (reserve_placement returned)
                 → rank process started (run_rank on the node agent spawned it)
                 → `copy_ready` (simulator up, readiness probe passed, replica published)
                 → response (the proxy saw the replica, scraped it and forwarded the request)

The simulator's own process start-up (interpreter and imports, with no delay configured) is measured
separately on the side: a real vLLM's start-up would take its place. Target (issue 7): p50 ≤ 1 s
over the configured start-up. Prints JSON.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import emit, summary
from gateway.endpoint.hold import WAKE_EVERY_S
from simulator.testing import start_simulator
from stack.driver import RunningStack, free_port_base, rank_record, wait_for

TRIALS = 7
STARTUP_DELAY_S = 2.0
MODEL = "Qwen/Qwen3-0.6B"
TARGET_S = 1.0


async def bare_simulator_start(runs: int = 3) -> list[float]:
    """Seconds from spawning `python -m simulator serve` (no delay) to /health answering."""
    seconds = []
    for _ in range(runs):
        simulator = await start_simulator(MODEL, env={"BERTH_SIM_STARTUP_DELAY": "0"}, wait_ready=False)
        seconds.append(await simulator.wait_ready(30))
        await simulator.stop()
    return seconds


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["at"]).timestamp()


def breakdown(stack: RunningStack, workflow_id: str, sent: float, answered: float) -> dict[str, float]:
    """The trial's stages in seconds, from the events recorded after `sent` (wall-clock)."""
    def recorded() -> list[dict[str, Any]]:
        return [e for e in stack.describe(workflow_id)["events"] if _at(e) >= sent - 0.05]

    # `copy_ready` is recorded after the copy is published, so the answer can come first: wait for it.
    wait_for(lambda: any(e["kind"] == "copy_ready" for e in recorded()), 10, "the copy_ready event")
    events = recorded()
    woken = next(e for e in events if e["kind"] == "woken")
    placed = next(e for e in events if e["kind"] == "copy_placed")
    ready = next(e for e in events if e["kind"] == "copy_ready" and e["copy_id"] == placed["copy_id"])
    rank_started = float(rank_record(stack.state_dir, placed["copy_id"], 0)["started"])
    return {
        "request_to_woken": _at(woken) - sent,
        "woken_to_copy_placed": _at(placed) - _at(woken),
        "copy_placed_to_rank_started": rank_started - _at(placed),
        "rank_started_to_copy_ready_minus_delay": _at(ready) - rank_started - STARTUP_DELAY_S,
        "copy_ready_to_response": answered - _at(ready),
    }


def run_trials(stack: RunningStack, proxy: bool) -> list[dict[str, float]]:
    """TRIALS wakes of one pool: `Proxy=false` (the endpoint proxy routes to the copy) or `Proxy=true`
    (the request goes on through the pool's LiteLLM proxy once LiteLLM routes to the woken copy)."""
    trials: list[dict[str, float]] = []
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy={str(proxy).lower()},MinReplicas=0,MaxReplicas=1,"
                "DrainGrace=1,Scope=user")
    endpoint = stack.endpoint(workflow_id)
    url, token = endpoint["url"] + "/v1/chat/completions", stack.token_for(endpoint["id"])
    last_wake = 0.0
    for _ in range(TRIALS):
        stack.cli("workflow", "scale", workflow_id, "--replicas", "0")
        stack.wait_phase(workflow_id, {"scaled_to_zero"}, timeout=60)
        wait_for(lambda: not stack.api("GET", f"/v1/endpoints/{endpoint['id']}").json()["replicas"], 30,
                 "the replica to be unpublished")
        # The proxy's routing table (1 s refresh) has dropped the copy, and this proxy may wake the
        # endpoint again: a request held sooner would wait for the wake interval, not for the pool.
        time.sleep(max(1.5, WAKE_EVERY_S + 0.5 - (time.monotonic() - last_wake)))
        last_wake = time.monotonic()
        sent = time.time()
        response = httpx.post(url, timeout=60, headers={"Authorization": f"Bearer {token}"},
                              json={"model": MODEL, "max_tokens": 4,
                                    "messages": [{"role": "user", "content": "hello"}]})
        answered = time.time()
        response.raise_for_status()
        trial = {"first_request_s": answered - sent,
                 "over_startup_delay_s": answered - sent - STARTUP_DELAY_S}
        trial.update(breakdown(stack, workflow_id, sent, answered))
        trials.append({k: round(v, 3) for k, v in trial.items()})
    stack.cli("workflow", "stop", workflow_id)
    return trials


def report(trials: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "trials": trials,
        "first_request_s": summary([t["first_request_s"] for t in trials]),
        "over_startup_delay_s": summary([t["over_startup_delay_s"] for t in trials]),
        "stages_s": {stage: summary([t[stage] for t in trials]) for stage in trials[0]
                     if stage not in ("first_request_s", "over_startup_delay_s")},
    }


def main() -> None:
    bare = asyncio.run(bare_simulator_start())
    state = Path(tempfile.mkdtemp(prefix="berth-bench-wake-")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB",
                         extra_env={"BERTH_SIM_STARTUP_DELAY": str(STARTUP_DELAY_S),
                                    "BERTH_SIM_TOKENS_PER_SECOND": "0"}).start()
    try:
        direct = report(run_trials(stack, proxy=False))
        through_litellm = report(run_trials(stack, proxy=True))
    finally:
        stack.stop()
    emit("wake_from_zero", {
        "simulator_startup_delay_s": STARTUP_DELAY_S,
        "proxy_false": direct,
        "proxy_true_through_litellm": through_litellm,
        "bare_simulator_process_start_s": summary(bare),
        "target_over_startup_delay_p50_s": TARGET_S,
        "meets_target": direct["over_startup_delay_s"]["p50"] <= TARGET_S,
        "meets_target_through_litellm": through_litellm["over_startup_delay_s"]["p50"] <= TARGET_S,
    })


if __name__ == "__main__":
    main()
