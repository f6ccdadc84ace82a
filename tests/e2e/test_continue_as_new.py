"""A live pool continues as new while serving, and no request is lost: the test floods its workflow with
no-op `wake` signals (desired > 0, so they change nothing) until Temporal suggests continuing as new; the pool
does, its copies running on (same copy IDs, never placed again), while a client keeps sending requests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus

from berth.security import Cipher
from berth.settings import StateLayout
from berth.temporal import connect
from tests.support import RunningStack, free_port_base, wait_for
from workflows.pool_workflow import PoolWorkflow

pytestmark = pytest.mark.timeout(600)
MODEL = "Qwen/Qwen3-0.6B"
SIGNALS_AT_ONCE = 50


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    running = RunningStack(state_dir=Path(tmp_path_factory.mktemp("continue-as-new")), port_base=free_port_base(),
                           nodes=1, simulate_gpus="2x80GB",
                           # Temporal suggests continuing as new at 4K events by default: flooding that far cost
                           # the suite ~4,000 signals' CPU; the pool's handling is the same at 400.
                           extra_env={"BERTH_SIM_TOKENS_PER_SECOND": "400",
                                      "BERTH_TEMPORAL_DYNAMIC_CONFIG": "limit.historyCount.suggestContinueAsNew=400"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


def kinds(stack: RunningStack, workflow_id: str) -> list[str]:
    # A query the flood crowds out answers without events ("phase": "unknown"): read again later.
    return [event["kind"] for event in stack.describe(workflow_id).get("events", [])]


async def flood_until_continued(stack: RunningStack, workflow_id: str) -> int:
    """Signal until the first run has continued as new (as Temporal itself sees it); how many were sent."""
    client = await connect(stack.info["temporal_address"], Cipher.load_or_create(StateLayout(stack.state_dir).keys))
    handle = client.get_workflow_handle(workflow_id)
    first_run = (await handle.describe()).run_id
    sent = 0
    while sent < 40000:
        await asyncio.gather(*(handle.signal(PoolWorkflow.wake, "the continue-as-new test")
                               for _ in range(SIGNALS_AT_ONCE)))
        sent += SIGNALS_AT_ONCE
        if (await client.get_workflow_handle(workflow_id, run_id=first_run).describe()).status \
                is WorkflowExecutionStatus.CONTINUED_AS_NEW:
            return sent
    raise AssertionError(f"no continue-as-new after {sent} signals")


def test_a_serving_pool_continues_as_new_and_loses_no_request(stack: RunningStack) -> None:
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=2,MaxReplicas=2,Scope=user")
    endpoint = stack.endpoint(workflow_id)
    token = stack.token_for(endpoint["id"])
    wait_for(lambda: sum(r["status"] == "ready" for r in stack.describe(workflow_id)["copies"]) == 2, 120,
             "two ready copies")
    copies = sorted(r["copy_id"] for r in stack.describe(workflow_id)["copies"])
    continued = threading.Event()
    answers: list[str] = []

    def load() -> None:  # a client that keeps the pool busy until it has continued as new, and a while after
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
        with httpx.Client(timeout=60) as http:
            after = 0
            while after < 20:
                try:
                    response = http.post(endpoint["url"] + "/v1/chat/completions", json=body,
                                         headers={"Authorization": f"Bearer {token}"})
                    answers.append(str(response.status_code))
                except httpx.HTTPError as error:  # a lost request: counted, not raised in the thread
                    answers.append(type(error).__name__)
                after += continued.is_set()

    client = threading.Thread(target=load)
    client.start()
    try:
        sent = asyncio.run(flood_until_continued(stack, workflow_id))
    finally:
        continued.set()
        client.join()
    print(f"continued as new after {sent} signals; {len(answers)} requests answered")
    assert answers and set(answers) == {"200"}
    wait_for(lambda: "continued_as_new" in kinds(stack, workflow_id), 120, "the new run answering its status")
    status = stack.describe(workflow_id)
    assert sorted(r["copy_id"] for r in status["copies"]) == copies
    assert all(r["status"] == "ready" for r in status["copies"]) and status["phase"] == "ready"
    assert kinds(stack, workflow_id)[0] == "submitted"  # the earlier runs' events were carried
    stack.cli("workflow", "stop", workflow_id)
    stack.wait_phase(workflow_id, {"stopped"}, 120)
