"""`catalog start` → endpoint answering, with the engine simulator at zero start-up delay.

Target (issue 2): p50 ≤ 3 s. Prints JSON.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from bench.common import emit, summary
from stack.driver import RunningStack, free_port_base

RUNS = 7


def main() -> None:
    state = Path(tempfile.mkdtemp(prefix="berth-bench-")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="8x80GB",
                         extra_env={"BERTH_SIM_STARTUP_DELAY": "0"}).start()
    durations = []
    try:
        for _ in range(RUNS):
            started = time.monotonic()
            created = stack.api("POST", "/v1/workflows", json={"entry": "GPT-OSS 20B", "values": {}}).json()
            token = stack.api("POST", f"/v1/endpoints/{created['endpoint_id']}/tokens",
                              json={"expiration": "1h"}).json()["token"]
            while True:
                response = httpx.post(created["url"] + "/v1/chat/completions", timeout=10,
                                      headers={"Authorization": f"Bearer {token}"},
                                      json={"model": "openai/gpt-oss-20b", "max_tokens": 4,
                                            "messages": [{"role": "user", "content": "hi"}]})
                if response.status_code == 200:
                    break
                time.sleep(0.02)
            durations.append(time.monotonic() - started)
            stack.cli("workflow", "stop", created["id"])
    finally:
        stack.stop()
    stats = summary(durations)
    emit("start_to_ready", {"seconds": stats, "target_p50_s": 3.0, "meets_target": stats["p50"] <= 3.0})


if __name__ == "__main__":
    main()
