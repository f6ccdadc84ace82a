"""Self-healing replica pools on a real simulated stack: a hung engine (SIGSTOPped: alive, socket open, nothing
answers) is failed by its /health probe and re-placed; a crashed copy of a MinReplicas=2 pool is re-placed
by default while the other copy serves; a model that always fails ends the workflow after the same exit on
consecutive copies."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import RunningStack, free_port_base, gpus_held, rank_record, wait_for

MODEL = "Qwen/Qwen3-0.6B"
POOL = f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=2"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("healing"))
    # Probes and back-offs shortened from their defaults (5 s, 5 s → 120 s) so the test runs in seconds.
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="4x80GB",
                           extra_env={"BERTH_HEALTH_CHECK_INTERVAL_S": "1", "BERTH_HEALTH_CHECK_TIMEOUT_S": "1",
                                      "BERTH_REPLACE_BACKOFF_S": "1", "BERTH_REPLACE_BACKOFF_MAX_S": "2"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


class Load:
    """Chat requests one after another through the endpoint until stopped; every status kept."""

    def __init__(self, stack: RunningStack, workflow_id: str) -> None:
        endpoint = stack.endpoint(workflow_id)
        self.url = endpoint["url"] + "/v1/chat/completions"
        self.token = stack.token_for(endpoint["id"])
        self.statuses: list[int | str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(2)]

    def _run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
        while not self._stop.is_set():
            try:
                response = httpx.post(self.url, json=body, timeout=60,
                                      headers={"Authorization": f"Bearer {self.token}"})
                self.statuses.append(response.status_code)
            except httpx.HTTPError as error:
                self.statuses.append(type(error).__name__)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=90)


def ready_copies(stack: RunningStack, workflow_id: str) -> list[str]:
    return [r["copy_id"] for r in stack.describe(workflow_id)["copies"] if r["status"] == "ready"]


def replaced(stack: RunningStack, workflow_id: str, victim: str) -> list[str]:
    """Two ready copies again, the victim not among them."""
    ready = ready_copies(stack, workflow_id)
    return ready if len(ready) == 2 and victim not in ready else []


def routing(stack: RunningStack, endpoint_id: str) -> dict[str, bool]:
    """Each published copy of the endpoint: whether proxies route to it."""
    rows = stack.api("GET", f"/v1/endpoints/{endpoint_id}").json()["copies"]
    return {row["copy_id"]: row["ready"] and not row["draining"] for row in rows}


def events(info: dict[str, Any], kind: str) -> list[str]:
    return [e["message"] for e in info["events"] if e["kind"] == kind]


def test_a_hung_engine_is_failed_by_its_health_probe_and_replaced(stack: RunningStack) -> None:
    workflow_id = stack.start_entry("vLLM", POOL)
    wait_for(lambda: len(ready_copies(stack, workflow_id)) == 2, 60, "2 ready copies")
    victim = ready_copies(stack, workflow_id)[0]
    record = rank_record(stack.state_dir, victim, 0)
    pid = int(record["pid"])
    endpoint_id = stack.endpoint(workflow_id)["id"]
    try:
        with Load(stack, workflow_id) as load:
            wait_for(lambda: len(load.statuses) >= 5, 30, "requests to flow")
            os.killpg(pid, signal.SIGSTOP)  # alive, listening, answering nothing
            # Readiness: out of routing at the first failed probe, while still published (not yet failed).
            wait_for(lambda: routing(stack, endpoint_id).get(victim) is False, 30, "the hung copy out of routing")
            wait_for(lambda: replaced(stack, workflow_id, victim), 90, "the hung copy to be re-placed")
            served = len(load.statuses)
            wait_for(lambda: len(load.statuses) >= served + 5, 30, "requests to the new pool")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)  # already killed by its node agent, unless the test failed
    assert set(load.statuses) == {200}, load.statuses
    info = stack.describe(workflow_id)
    assert info["status"] == "running"
    failed = " ".join(events(info, "copy_failed"))
    assert (f"rank 0 on node {record['node_id']} was stopped: its engine stopped answering: "
            "/health failed 3 times in a row (timeout after 1 s)") in failed
    assert any(victim in m for m in events(info, "copy_replaced"))
    stack.cli("workflow", "stop", workflow_id)
    assert gpus_held(stack, workflow_id) == 0


def test_a_crashed_copy_is_replaced_by_default_while_the_other_serves(stack: RunningStack) -> None:
    workflow_id = stack.start_entry("vLLM", POOL)  # ReplaceFailedCopies left at its default
    wait_for(lambda: len(ready_copies(stack, workflow_id)) == 2, 60, "2 ready copies")
    victim = ready_copies(stack, workflow_id)[0]
    with Load(stack, workflow_id) as load:
        wait_for(lambda: len(load.statuses) >= 5, 30, "requests to flow")
        os.kill(int(rank_record(stack.state_dir, victim, 0)["pid"]), signal.SIGKILL)
        wait_for(lambda: replaced(stack, workflow_id, victim), 60, "the crashed copy to be re-placed")
    assert set(load.statuses) == {200}, load.statuses
    info = stack.describe(workflow_id)
    assert info["status"] == "running" and info["phase"] == "ready"
    assert any("1 of ReplaceFailedCopies=3 in a row" in m for m in events(info, "copy_replaced"))
    assert any("killed by signal 9 (SIGKILL)" in m for m in events(info, "copy_failed"))
    stack.cli("workflow", "stop", workflow_id)


def test_a_model_that_always_fails_ends_the_workflow(stack: RunningStack) -> None:
    # vLLM (and the simulator) refuse to start with this flag alone: every copy exits with status 2.
    workflow_id = stack.start_entry("vLLM", POOL + ",ExtraArgs=--enable-auto-tool-choice", watch=False)
    info = stack.wait_phase(workflow_id, {"failed"}, timeout=120)
    assert info["last_error"].startswith("3 copies in a row failed the same way without one becoming ready; "
                                         "the model keeps failing: copy stopped as a unit: rank 0 on node ")
    assert "exited with status 2" in info["last_error"]
    assert "--enable-auto-tool-choice requires --tool-call-parser" in info["last_error"]
    assert len(events(info, "copy_failed")) == 3 and len(events(info, "copy_replaced")) == 2
    wait_for(lambda: gpus_held(stack, workflow_id) == 0, 30, "the GPUs to be released")
