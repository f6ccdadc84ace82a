"""Replica pools on a real stack: manual scale with drain, scale to zero and wake on request, the
held-request cap, and no failed non-streamed request when a replica dies mid-load (Proxy=false)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support import RunningStack, free_port_base, rank_record, wait_for

STARTUP_DELAY_S = 2.0
MODEL = "Qwen/Qwen3-0.6B"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("pools"))
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="4x80GB",
                           extra_env={"BERTH_SIM_STARTUP_DELAY": str(STARTUP_DELAY_S),
                                      "BERTH_SIM_TOKENS_PER_SECOND": "100",
                                      "BERTH_PROXY_MAX_HELD": "2"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def pool(stack: RunningStack) -> dict[str, str]:
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=0,MaxReplicas=3,DrainGrace=10,"
                "Scope=user")
    endpoint = stack.endpoint(workflow_id)
    return {"workflow_id": workflow_id, "endpoint_id": endpoint["id"], "url": endpoint["url"],
            "token": stack.token_for(endpoint["id"])}


def ready_copies(stack: RunningStack, workflow_id: str) -> list[str]:
    return [r["copy_id"] for r in stack.describe(workflow_id)["copies"] if r["status"] == "ready"]


def scale_to_zero(stack: RunningStack, pool: dict[str, str]) -> None:
    """Scale the pool to zero and wait until no endpoint proxy can route to any of its copies.

    The proxy's own table is not observable from outside; what it refreshes from is. Wait until the
    endpoint lists no published copy: each was unpublished only after `drain_replica` had marked it
    draining and let the proxies' routes settle (activities/control.py ROUTES_SETTLE_S, longer than the
    proxy's refresh), so the proxy already holds every one of them as draining, never as a target."""
    stack.cli("workflow", "scale", pool["workflow_id"], "--replicas", "0")
    stack.wait_phase(pool["workflow_id"], {"scaled_to_zero"}, timeout=60)
    wait_for(lambda: not stack.api("GET", f"/v1/endpoints/{pool['endpoint_id']}").json()["copies"], 30,
             "the endpoint to list no copy")


def chat(pool: dict[str, str], timeout: float = 60, **headers: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8}
    return httpx.post(pool["url"] + "/v1/chat/completions", json=body, timeout=timeout,
                      headers={"Authorization": f"Bearer {pool['token']}", **headers})


def test_manual_scale_up_publishes_annotated_replicas(stack: RunningStack, pool: dict[str, str]) -> None:
    started = time.monotonic()
    stack.cli("workflow", "scale", pool["workflow_id"], "--replicas", "3")
    wait_for(lambda: len(ready_copies(stack, pool["workflow_id"])) == 3, 60, "3 ready copies")
    print(f"scale 1 → 3: {time.monotonic() - started:.1f} s")
    row = stack.api("GET", f"/v1/endpoints/{pool['endpoint_id']}").json()
    assert len(row["copies"]) == 3 and all(r["ready"] and not r["draining"] for r in row["copies"])
    assert row["annotations"] == {"model_id": MODEL, "workflow_id": pool["workflow_id"], "owner": "admin",
                                  "scope": "user", "ready": True, "discoverable": True,
                                  "routing_policy": "least_queue"}
    kinds = [e["kind"] for e in stack.describe(pool["workflow_id"])["events"]]
    assert "scale_up" in kinds


def test_scale_beyond_bounds_is_one_clear_line(stack: RunningStack, pool: dict[str, str]) -> None:
    result = stack.cli("workflow", "scale", pool["workflow_id"], "--replicas", "4", check=False)
    assert result.returncode != 0
    assert "Cannot scale to 4 copies: MaxReplicas is 3." in result.stderr
    assert "Traceback" not in result.stderr


def test_killed_replica_mid_load_fails_no_request(stack: RunningStack, pool: dict[str, str]) -> None:
    copies = ready_copies(stack, pool["workflow_id"])
    assert len(copies) == 3
    victim = rank_record(stack.state_dir, copies[0], 0)

    def one(index: int) -> int:
        if index == 20:
            os.kill(int(victim["pid"]), signal.SIGKILL)
        return chat(pool).status_code

    with ThreadPoolExecutor(8) as executor:
        statuses = list(executor.map(one, range(80)))
    assert statuses.count(200) == 80, statuses
    wait_for(lambda: copies[0] not in ready_copies(stack, pool["workflow_id"]), 30, "the dead copy to go")


def test_scale_in_drains_then_stops(stack: RunningStack, pool: dict[str, str]) -> None:
    wait_for(lambda: len(ready_copies(stack, pool["workflow_id"])) >= 2, 60, "2 ready copies")
    stack.cli("workflow", "scale", pool["workflow_id"], "--replicas", "1")
    wait_for(lambda: len(stack.describe(pool["workflow_id"])["copies"]) == 1, 60, "1 copy")
    events = stack.describe(pool["workflow_id"])["events"]
    kinds = [e["kind"] for e in events]
    assert "scale_down" in kinds and "copy_draining" in kinds and "copy_drained" in kinds
    assert chat(pool).status_code == 200


def test_zero_then_a_request_wakes_the_pool(stack: RunningStack, pool: dict[str, str]) -> None:
    scale_to_zero(stack, pool)
    started = time.monotonic()
    response = chat(pool)
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    print(f"first request after zero: {elapsed:.2f} s (simulator start-up {STARTUP_DELAY_S} s)")
    assert elapsed < 30
    kinds = [e["kind"] for e in stack.describe(pool["workflow_id"])["events"]]
    assert "woken" in kinds


def test_held_requests_are_capped_and_time_out(stack: RunningStack, pool: dict[str, str]) -> None:
    scale_to_zero(stack, pool)
    # Three at once against a cap of two (BERTH_PROXY_MAX_HELD): whichever reaches the proxy third is
    # refused at once, whatever the order, and the other two are held until the woken copy serves them
    # (the simulator alone takes STARTUP_DELAY_S to start, far longer than three requests take to arrive).
    with ThreadPoolExecutor(3) as executor:
        answers = list(executor.map(lambda _: chat(pool), range(3)))
    assert sorted(a.status_code for a in answers) == [200, 200, 429], [a.text for a in answers]
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.headers["retry-after"]
    scale_to_zero(stack, pool)
    short = chat(pool, **{"x-request-timeout": "1"})  # the least a client may ask (1-300 s; else 400)
    assert short.status_code == 503 and short.headers["retry-after"]


@pytest.mark.litellm
def test_load_scales_up_to_max_then_down_then_idle_to_zero(stack: RunningStack) -> None:
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,MinReplicas=0,MaxReplicas=3,TargetRequestRate=1,"
                "ScaleDownDelay=2,ScaleToZeroAfter=15,DrainGrace=5")
    endpoint = stack.endpoint(workflow_id)
    target = {"url": endpoint["url"], "token": stack.token_for(endpoint["id"])}

    def desired() -> int:
        return int(stack.describe(workflow_id)["desired_copies"])

    started = time.monotonic()
    with ThreadPoolExecutor(4) as executor:
        statuses: list[int] = []
        while desired() < 3 and time.monotonic() - started < 40:
            statuses += [f.result().status_code for f in [executor.submit(chat, target) for _ in range(4)]]
            time.sleep(0.3)  # load pacing (the rate under test), not synchronization
    assert desired() == 3, "the load never drove the pool to MaxReplicas"
    assert set(statuses) == {200}
    print(f"load → 3 copies in {time.monotonic() - started:.1f} s")
    # Load stops: ScaleDownDelay, then ScaleToZeroAfter without a request.
    wait_for(lambda: desired() == 1, 30, "scale back down to 1 after the load stopped")
    stack.wait_phase(workflow_id, {"scaled_to_zero"}, timeout=30)
    events = stack.describe(workflow_id)["events"]
    reasons = [e["message"] for e in events if e["kind"] in ("scale_up", "scale_down")]
    assert any("TargetRequestRate" in r for r in reasons) and any("ScaleToZeroAfter" in r for r in reasons)
    # Proxy=true: the rate that sized the pool is the one its LiteLLM proxy measured.
    assert any("measured at the LiteLLM proxy" in r for r in reasons if "TargetRequestRate" in r)
    assert chat(target).status_code == 200  # and a request wakes it again
    stack.cli("workflow", "stop", workflow_id)
