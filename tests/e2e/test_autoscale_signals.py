"""The queue/TTFT autoscaler on a real stack (issue 17), the simulator as the copies (one request at a time,
the rest wait in its queue as in vLLM): a queue above ScaleOutQueue for ScaleOutSeconds adds a copy; a
copy whose /metrics stops answering holds the pool at its size, the reason naming it in `explain-scaling`;
once it answers again the idle pool scales in."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import RunningStack, free_port_base, rank_record, wait_for

MODEL = "Qwen/Qwen3-0.6B"
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("autoscale-signals"))
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="4x80GB",
                           extra_env={"BERTH_SIM_STARTUP_DELAY": "0", "BERTH_SIM_TOKENS_PER_SECOND": "40",
                                      "BERTH_SIM_MAX_NUM_SEQS": "1",
                                      # A stopped copy must stay a stale copy, not become a failed one.
                                      "BERTH_HEALTH_CHECK_INTERVAL_S": "0"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


@contextlib.contextmanager
def chatting(stack: RunningStack, workflow_id: str, clients: int) -> Iterator[None]:
    """`clients` threads sending chat requests one after another through the endpoint, for the block."""
    endpoint = stack.endpoint(workflow_id)
    token = stack.token_for(endpoint["id"])
    done = threading.Event()

    def client() -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {token}"}) as http:
            while not done.is_set():
                http.post(endpoint["url"] + "/v1/chat/completions", json=body)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=120)


def scaled_out_to_two(stack: RunningStack, workflow_id: str, timeout_s: float, what: str) -> str:
    """Wait until the pool wants two copies; the message of its last scale-up event."""
    wait_for(lambda: stack.describe(workflow_id)["desired_copies"] == 2, timeout_s, what)
    scaled = [e["message"] for e in stack.describe(workflow_id)["events"] if e["kind"] == "scale_up"]
    assert scaled, stack.describe(workflow_id)["events"]
    return str(scaled[-1])


def explain(stack: RunningStack, workflow_id: str) -> dict[str, object]:
    response = stack.api("GET", f"/v1/workflows/{workflow_id}/scaling")
    return response.json() if response.status_code == 200 else {}  # type: ignore[no-any-return]


def test_a_queue_scales_out_and_stale_metrics_hold_scale_in(stack: RunningStack) -> None:
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=1,MaxReplicas=2,Scope=user,"
                "ScaleOutQueue=1,ScaleOutSeconds=2,ScaleInQueue=0.5,ScaleInSeconds=25,DrainGrace=5")
    with chatting(stack, workflow_id, 6):
        scaled = scaled_out_to_two(stack, workflow_id, 90, "a scale-out on the queue")
        assert "autoscaler" in scaled, scaled
        wait_for(lambda: sum(c["status"] == "ready" for c in stack.describe(workflow_id)["copies"]) == 2, 60,
                 "two ready copies")
    ready = [c["copy_id"] for c in stack.describe(workflow_id)["copies"] if c["status"] == "ready"]
    frozen = int(rank_record(stack.state_dir, ready[0], 0)["pid"])
    # Its /metrics stops answering: its figures go stale 15 s later, well inside ScaleInSeconds (25 s), so the
    # idle pool is held by the stale copy, not scaled in before it goes stale.
    os.kill(frozen, signal.SIGSTOP)
    try:
        held = wait_for(lambda: (lambda e: e if e.get("decision") == "hold" and ready[0] in str(e.get("reason"))
                                 else None)(explain(stack, workflow_id)), 90, "a hold naming the stale copy")
        assert "fresh metrics" in str(held["reason"]), held
        assert stack.describe(workflow_id)["desired_copies"] == 2
        shown = stack.cli("workflow", "explain-scaling", workflow_id).stdout
        assert "hold" in shown and ready[0] in shown, shown
    finally:
        os.kill(frozen, signal.SIGCONT)
    wait_for(lambda: stack.describe(workflow_id)["desired_copies"] == 1, 90, "a scale-in once every copy is fresh")
    stack.cli("workflow", "stop", workflow_id)


def test_raising_max_replicas_is_all_a_user_does(stack: RunningStack) -> None:
    # The entry's own TargetConcurrency (the vLLM entry: 32 per copy), no threshold set; only the windows are
    # shortened so the test is brief. 40 requests in flight on one copy need two.
    described = stack.cli("catalog", "describe", "vLLM").stdout
    assert "TargetConcurrency" in described, described
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MaxReplicas=2,Scope=user,ScaleOutSeconds=2,"
                "ScaleInSeconds=8,DrainGrace=5")
    with chatting(stack, workflow_id, 40):
        scaled = scaled_out_to_two(stack, workflow_id, 120, "a scale-out on concurrency")
        assert "TargetConcurrency=32" in scaled, scaled
    # Idle: nothing in flight needs one copy (MinReplicas), after ScaleInSeconds with both copies heard.
    wait_for(lambda: stack.describe(workflow_id)["desired_copies"] == 1, 120, "a scale-in with the load gone")
    reasons = [e["message"] for e in stack.describe(workflow_id)["events"] if e["kind"] == "scale_down"]
    assert reasons and "in flight per copy need" in reasons[-1], reasons
    stack.cli("workflow", "stop", workflow_id)
