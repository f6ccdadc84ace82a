"""API replicas are stateless: two API processes (and two control workers, one reading through each)
against one store and one Temporal make one scaling decision per pool — on SQLite and on a real
PostgreSQL. Load reported to either API keeps either pool awake (the autoscaler reads the store, not an
API's memory); once the reports stop, each pool is scaled to zero once, by the lease's one holder.

The load is reported as the endpoint proxy reports it (`POST /v1/internal/endpoints/{id}/load`), with no
request reaching a copy: a copy's own counters would keep its pool awake whichever API heard of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from berth.processes import berth_python, free_port, spawn, stop_group_sync, wait_http_sync
from tests.support import RunningStack, free_port_base, wait_for

pytestmark = pytest.mark.timeout(420)
SCALE_TO_ZERO_AFTER_S = 10
POOL = ("vLLM", "Model=hf://Qwen/Qwen3-0.6B,GpusPerNode=1,Proxy=false,MinReplicas=0,MaxReplicas=2,DrainGrace=0,"
                f"ScaleToZeroAfter={SCALE_TO_ZERO_AFTER_S}")


@pytest.fixture
def two_apis(store_url: str, tmp_path: Path) -> Iterator[tuple[RunningStack, str]]:
    """`berth up` on `store_url`, then a second API process and a second control worker (reading through
    the second API) on the same store and Temporal: (stack, second API's URL)."""
    stack = RunningStack(state_dir=tmp_path / "state", port_base=free_port_base(), nodes=1,
                         simulate_gpus="4x80GB", extra_env={"BERTH_DATABASE_URL": store_url})
    stack.start()
    started = []
    try:
        port = free_port()
        env = dict(stack.env, BERTH_TEMPORAL_ADDRESS=stack.info["temporal_address"], BERTH_TOKEN=stack.token)
        api = spawn([*berth_python("cli"), "server", "--port", str(port)], tmp_path / "api-2.log", env=env,
                    cwd=stack.state_dir)
        started.append(api)
        url = f"http://127.0.0.1:{port}"
        wait_http_sync(f"{url}/healthz", 60, api)
        started.append(spawn([*berth_python("cli"), "worker"], tmp_path / "worker-2.log",
                             env=dict(env, BERTH_API_URL=url), cwd=stack.state_dir))
        yield stack, url
    finally:
        for process in started:
            stop_group_sync(process.pid, 10)
        stack.stop()


def _autoscaler_events(stack: RunningStack, workflow_id: str) -> list[str]:
    return [e["message"] for e in stack.describe(workflow_id)["events"] if e["message"].startswith("autoscaler:")]


def test_one_scaling_decision_per_pool_with_two_api_processes(two_apis: tuple[RunningStack, str],
                                                               store_url: str) -> None:
    stack, second_api = two_apis
    pools = [stack.start_entry(*POOL, watch=False) for _ in range(2)]
    endpoints = [stack.describe(workflow_id)["endpoint"]["id"] for workflow_id in pools]
    # Pool 0's load reaches the first API only, pool 1's the second only; from before the pools are
    # ready, so neither is idle for a moment once it is.
    reporters = [(stack.info["api_url"], endpoints[0]), (second_api, endpoints[1])]
    headers = {"Authorization": f"Bearer {stack.token}"}
    stop, failures = threading.Event(), list[str]()

    def report() -> None:
        while not stop.wait(0.5):  # the proxy's pace is 1 s; twice as often leaves no gap near the limit
            for api, endpoint_id in reporters:
                try:
                    httpx.post(f"{api}/v1/internal/endpoints/{endpoint_id}/load", json={"requests": 1},
                               headers=headers, timeout=10).raise_for_status()
                except httpx.HTTPError as error:
                    failures.append(f"{api}: {error}")

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    try:
        for workflow_id in pools:
            stack.wait_phase(workflow_id, {"ready"}, timeout=120)
        # Longer than ScaleToZeroAfter: an autoscaler that saw only one API's reports would scale a pool down.
        awake_until = time.monotonic() + SCALE_TO_ZERO_AFTER_S + 6
        while time.monotonic() < awake_until:
            for workflow_id in pools:
                info = stack.describe(workflow_id)
                assert info["desired_copies"] == 1 and not _autoscaler_events(stack, workflow_id), info["events"]
            time.sleep(0.5)  # sampling the pools while the load lasts, not synchronization
    finally:
        stop.set()
        reporter.join(timeout=15)
    assert failures == []
    for workflow_id in pools:
        stack.wait_phase(workflow_id, {"scaled_to_zero"}, timeout=SCALE_TO_ZERO_AFTER_S + 40)
    # The lease's holder keeps ticking for 3 s more: a second decision would have been taken by then.
    engine = create_engine(store_url)
    settled = time.time() + 3

    def lease_renewed_after_settling() -> bool:
        with engine.connect() as connection:
            expires = connection.execute(text("SELECT expires_at FROM store_locks WHERE name = 'autoscaler'"))
            return (expires.scalar() or 0) > settled + 4  # renewed with LEASE_S = 5 after `settled`

    wait_for(lease_renewed_after_settling, 30, "the autoscaler to tick again after both pools scaled to zero")
    engine.dispose()
    for workflow_id in pools:
        decisions = _autoscaler_events(stack, workflow_id)
        assert len(decisions) == 1 and "1 → 0" in decisions[0] and "ScaleToZeroAfter" in decisions[0], decisions
    for workflow_id in pools:
        stack.cli("workflow", "stop", workflow_id)
