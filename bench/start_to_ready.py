"""`catalog start` → endpoint answering, with the engine simulator at zero start-up delay, the product's defaults:
`Proxy=true` (a LiteLLM front per model) and the node agent's LiteLLM standby on.

Target (issues 2 and 33): p50 ≤ 3 s. Before the first start the bench waits until the node agent's standby has
imported (its log holds its ready line): a cluster's first start comes minutes after its agents started. The
standby forks every start after that: back to back, they measure what a busy cluster's starts cost. Prints JSON.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from activities.litellm_standby import STANDBY_LOG
from bench.common import emit, summary
from gateway.litellm_hooks.standby import READY_LINE
from stack.driver import RunningStack, free_port_base

RUNS = 7
STANDBY_WAIT_S = 180.0


def _standby_ready(stack: RunningStack) -> bool:
    log = stack.state_dir / "nodes" / "node-1" / "litellm-standby" / STANDBY_LOG
    return log.exists() and READY_LINE in log.read_text(errors="replace")


def _first_answer(url: str, token: str) -> None:
    """Ask until a chat completion answers 200 (a request held while the front starts may time out: ask again)."""
    while True:
        try:
            response = httpx.post(url + "/v1/chat/completions", timeout=30,
                                  headers={"Authorization": f"Bearer {token}"},
                                  json={"model": "openai/gpt-oss-20b", "max_tokens": 4,
                                        "messages": [{"role": "user", "content": "hi"}]})
            if response.status_code == 200:
                return
        except httpx.TimeoutException:
            pass
        time.sleep(0.02)


def main() -> None:
    state = Path(tempfile.mkdtemp(prefix="berth-bench-")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="8x80GB",
                         extra_env={"BERTH_SIM_STARTUP_DELAY": "0", "BERTH_LITELLM_STANDBY": "on"}).start()
    durations = []
    try:
        deadline = time.monotonic() + STANDBY_WAIT_S
        while not _standby_ready(stack) and time.monotonic() < deadline:
            time.sleep(0.5)
        for _ in range(RUNS):
            started = time.monotonic()
            created = stack.api("POST", "/v1/workflows", json={"entry": "GPT-OSS 20B", "values": {}}).json()
            token = stack.api("POST", f"/v1/endpoints/{created['endpoint_id']}/tokens",
                              json={"expiration": "1h"}).json()["token"]
            _first_answer(created["url"], token)
            durations.append(time.monotonic() - started)
            stack.cli("workflow", "stop", created["id"])
    finally:
        stack.stop()
    stats = summary(durations)
    emit("start_to_ready", {"seconds": stats, "runs": [round(d, 2) for d in durations], "proxy": True,
                            "target_p50_s": 3.0, "meets_target": stats["p50"] <= 3.0})


if __name__ == "__main__":
    main()
