"""Stack lifecycle: GPUs freed by stop, durability across a control-worker restart and a full
`berth down` / `berth up`, and no process left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.processes import stop_group_sync
from tests.support import REPO, RunningStack, free_port_base, processes_mentioning, wait_for

pytestmark = pytest.mark.litellm  # starts the real LiteLLM proxy


@pytest.fixture
def one_gpu_stack(tmp_path: Path) -> Iterator[RunningStack]:
    # Restarts off: these tests stop and replace components by hand (tests/e2e/test_self_healing.py
    # covers the stack restarting them).
    stack = RunningStack(state_dir=tmp_path / "state", port_base=free_port_base(), nodes=1,
                         simulate_gpus="1x80GB", extra_env={"BERTH_RESTART_COMPONENTS": "false"}).start()
    try:
        yield stack
    finally:
        stack.stop()


def _chat(url: str, token: str) -> str:
    response = httpx.post(url + "/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {token}"},
                          json={"model": "openai/gpt-oss-20b", "max_tokens": 16,
                                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def test_second_start_waits_for_the_gpu_then_serves(one_gpu_stack: RunningStack) -> None:
    stack = one_gpu_stack
    first = stack.start_entry("GPT-OSS 20B", "Proxy=false")
    second = stack.start_entry("GPT-OSS 20B", "Proxy=false", watch=False)
    info = stack.wait_phase(second, {"scheduling"})
    deadline = time.monotonic() + 30
    while not any(e["kind"] == "scheduling_blocked" for e in info["events"]) and time.monotonic() < deadline:
        time.sleep(0.3)
        info = stack.describe(second)
    blocked = [e for e in info["events"] if e["kind"] == "scheduling_blocked"]
    assert blocked and "1 free GPU" in blocked[0]["message"]
    assert "pending" in info["copies"][0]["detail"]
    stack.cli("workflow", "stop", first)
    stack.wait_phase(second, {"ready"}, timeout=60)
    endpoint = stack.endpoint(second)
    assert "Paris" in _chat(endpoint["url"], stack.token_for(endpoint["id"]))
    stack.cli("workflow", "stop", second)


def test_control_worker_restart_during_start(one_gpu_stack: RunningStack) -> None:
    stack = one_gpu_stack
    worker = next(c for c in stack.info["children"] if c["name"] == "worker")
    stop_group_sync(worker["pid"], 5)
    workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false", watch=False)  # accepted while no worker runs

    def held_by_temporal() -> dict[str, Any] | None:
        info = stack.describe(workflow_id)
        return info if info.get("status") == "running" else None

    # Temporal holds it running and no worker answers its query: the start waits for a worker.
    waiting = wait_for(held_by_temporal, 30, "Temporal to hold the workflow running")
    assert waiting["phase"] == "unknown", waiting
    env = stack.env
    env.update({"BERTH_TEMPORAL_ADDRESS": stack.info["temporal_address"], "BERTH_API_URL": stack.info["api_url"],
                "BERTH_TOKEN": stack.token})
    log = open(stack.state_dir / "worker-restarted.log", "ab")  # noqa: SIM115
    replacement = subprocess.Popen([sys.executable, "-m", "cli", "worker"], cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        stack.wait_phase(workflow_id, {"ready"}, timeout=90)
        endpoint = stack.endpoint(workflow_id)
        assert "Paris" in _chat(endpoint["url"], stack.token_for(endpoint["id"]))
        stack.cli("workflow", "stop", workflow_id)
        ranks = stack.state_dir / "nodes" / "node-1" / "ranks"
        assert not list(ranks.glob("*/rank.json")), "a rank process is still recorded as running"
        assert not [p for p in processes_mentioning("-m simulator") if str(stack.state_dir) in p]
    finally:
        os.killpg(replacement.pid, signal.SIGTERM)
        replacement.wait(timeout=30)
        log.close()


def test_down_leaves_nothing_and_up_resumes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="2x80GB").start()
    try:
        workflow_id = stack.start_entry("GPT-OSS 20B")
        endpoint = stack.endpoint(workflow_id)
        token = stack.token_for(endpoint["id"], "8h")
        assert "Paris" in _chat(endpoint["url"], token)
        pids = [c["pid"] for c in stack.info["children"]] + [stack.info["pid"]]
        stack.cli("down", "--state-dir", str(state))
        assert not (state / "stack.json").exists()
        assert not processes_mentioning(str(state)), "berth down left processes behind"
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
        # Same state dir again: the workflow, its endpoint and its token survive; the copy is placed again.
        stack.start()
        assert workflow_id in {w["id"] for w in stack.cli_json("workflow", "list")}
        # The copy that served before `down` was interrupted; a fresh one is placed and serves.
        deadline = time.monotonic() + 120
        info = stack.describe(workflow_id)
        while time.monotonic() < deadline and not (
            info.get("phase") == "ready" and any(e["kind"] == "copy_interrupted" for e in info["events"])
            and any(r["status"] == "ready" and not r["copy_id"].endswith("copy-0") for r in info["copies"])
        ):
            time.sleep(0.3)
            info = stack.describe(workflow_id)
        assert "Paris" in _chat(endpoint["url"], token)
    finally:
        stack.stop()
    assert not processes_mentioning(str(state))
    assert json.loads((state / "client.json").read_text())["token"]
