"""A Proxy=true model whose only copy is SIGKILLed under load, on a real simulated stack with the real
LiteLLM proxy: every request succeeds. Requests that arrive while the copy is being re-placed are held by
the endpoint proxy (not answered with LiteLLM's "no deployment" 400), and a completion in flight in the
dying copy (LiteLLM's 500 "Connection error") is sent again once the re-placed copy is routed.
The chaos soak's two avoidable failures (docs/performance.md), as a test. And the model's LiteLLM itself
SIGKILLed: its node agent's standby (activities/litellm_standby.py, spawned at the agent's start: the product's
default, which the rest of the suite defers to the first LiteLLM start) forks the restarted LiteLLM, serving again
within seconds."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from activities.litellm_standby import STANDBY_LOG
from gateway.litellm_hooks.standby import READY_LINE
from tests.e2e.test_pool_healing import Load, events, ready_copies
from tests.support import RunningStack, free_port_base, rank_record, service_record, wait_for

pytestmark = [pytest.mark.litellm, pytest.mark.timeout(300)]

MODEL = "Qwen/Qwen3-0.6B"
SINGLE = f"Model=hf://{MODEL},GpusPerNode=1"  # Proxy=true by default; one copy; ReplaceFailedCopies=auto
# Issue 33's goal is 3 s on a quiet machine (the restart at once, the handover, the hook's
# first copy list); a cold LiteLLM took 20-45 s on a busy one. The bound leaves room for a loaded CI machine.
LITELLM_BACK_WITHIN_S = 12.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("copyloss"))
    # A 0.3 s first token keeps requests in flight inside the copy when it is killed; back-offs shortened.
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="2x80GB",
                           extra_env={"BERTH_SIM_TTFT": "0.3", "BERTH_REPLACE_BACKOFF_S": "1",
                                      "BERTH_REPLACE_BACKOFF_MAX_S": "2", "BERTH_LITELLM_STANDBY": "on"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_killing_the_only_copy_behind_litellm_loses_no_request(stack: RunningStack) -> None:
    workflow_id = stack.start_entry("vLLM", SINGLE)
    wait_for(lambda: len(ready_copies(stack, workflow_id)) == 1, 90, "the copy to be ready")
    victim = ready_copies(stack, workflow_id)[0]
    with Load(stack, workflow_id) as load:
        wait_for(lambda: load.statuses.count(200) >= 5, 60, "requests to flow through LiteLLM")
        os.kill(int(rank_record(stack.state_dir, victim, 0)["pid"]), signal.SIGKILL)
        wait_for(lambda: (ready := ready_copies(stack, workflow_id)) and victim not in ready, 90,
                 "the copy to be re-placed")
        served = len(load.statuses)
        wait_for(lambda: len(load.statuses) >= served + 5, 60, "requests to the re-placed copy")
    assert set(load.statuses) == {200}, load.statuses
    info = stack.describe(workflow_id)
    assert info["status"] == "running"
    assert any("killed by signal 9 (SIGKILL)" in m for m in events(info, "copy_failed"))
    stack.cli("workflow", "stop", workflow_id)


def forked(log: Path) -> int:
    """How many of a workflow's LiteLLM starts were forked from its node agent's standby (each says so in its log)."""
    return log.read_text(errors="replace").count("is forked from the LiteLLM standby")


def litellm_pid(stack: RunningStack, workflow_id: str) -> int | None:
    try:
        return int(service_record(stack.state_dir, workflow_id)["pid"])
    except (AssertionError, ValueError, KeyError, OSError):
        return None  # between two processes: no pidfile


def test_a_killed_litellm_serves_again_within_seconds(stack: RunningStack) -> None:
    workflow_id = stack.start_entry("vLLM", SINGLE)
    wait_for(lambda: len(ready_copies(stack, workflow_id)) == 1, 90, "the copy to be ready")
    endpoint = stack.endpoint(workflow_id)
    url, token = endpoint["url"] + "/v1/chat/completions", stack.token_for(endpoint["id"])
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}

    def answered() -> bool:
        response = httpx.post(url, json=body, timeout=30, headers={"Authorization": f"Bearer {token}"})
        return response.status_code == 200

    wait_for(answered, 60, "a request through LiteLLM")
    log = Path(service_record(stack.state_dir, workflow_id)["log"])
    # Its first start was forked from the standby node-1 spawned when it started, which forks the restart too.
    wait_for(lambda: forked(log) == 1, 10, "the first start's record")
    old = int(service_record(stack.state_dir, workflow_id)["pid"])
    killed = time.monotonic()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: litellm_pid(stack, workflow_id) not in (None, old), LITELLM_BACK_WITHIN_S, "a new LiteLLM",
             every=0.05)
    wait_for(answered, LITELLM_BACK_WITHIN_S, "the restarted LiteLLM to serve", every=0.05)
    back_s = time.monotonic() - killed
    print(f"litellm serving again {back_s:.2f} s after its SIGKILL")
    assert back_s <= LITELLM_BACK_WITHIN_S, log.read_text(errors="replace")[-4000:]
    assert forked(log) == 2  # both starts were warm
    # One standby imported once for node-1's life: every LiteLLM start of this module was forked from it.
    standby_log = stack.state_dir / "nodes" / "node-1" / "litellm-standby" / STANDBY_LOG
    assert standby_log.read_text(errors="replace").count(READY_LINE) == 1
    stack.cli("workflow", "stop", workflow_id)
