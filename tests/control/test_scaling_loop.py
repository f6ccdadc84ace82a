"""The autoscaler's loop against real /metrics servers on loopback: a queue held above ScaleOutQueue scales
the pool out, and a copy that stops answering holds scale-in with its name in the recorded reason."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from berth.contracts.policies import ScaleAllowance
from berth.contracts.rollouts import ScalingExplanation
from berth.contracts.workflows import Phase, PoolStatus
from control.autoscale_loop import Autoscaler

ANNOTATIONS = {"pool": True, "proxy": False, "min_replicas": 1, "max_replicas": 3, "scale_out_queue": 4,
               "scale_out_s": 0.5, "scale_in_queue": 1, "scale_in_s": 0.5}


class Copy:
    """One copy's vLLM /metrics on a real loopback port; `waiting` is what it reports."""

    def __init__(self) -> None:
        self.waiting = 0.0
        copy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 — http.server's name
                body = f'vllm:num_requests_waiting{{model_name="m"}} {copy.waiting}\n'.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def two_copies() -> Iterator[list[Copy]]:
    copies = [Copy(), Copy()]
    yield copies
    for copy in copies:
        if copy.thread.is_alive():
            copy.stop()


class FakeApi:
    def __init__(self, ready: dict[str, str], quota_copies: int | None = None) -> None:
        self.ready = ready
        self.recorded: list[ScalingExplanation] = []
        self.quota_copies = quota_copies  # the most copies a quota lets the pool have (None: no quota)
        self.asked: list[tuple[int, int]] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/v1/internal/autoscaler")
        return {"leader": True, "pools": [{"endpoint_id": "ep1", "workflow_id": "wf1", "annotations": ANNOTATIONS,
                                           "ready_copies": self.ready}], "reports": []}

    async def record_scaling(self, explanation: ScalingExplanation) -> None:
        self.recorded.append(explanation)

    async def scale_allowance(self, workflow_id: str, current: int, wanted: int) -> ScaleAllowance:
        """As the API's allowance route answers under a user's max_copies (server/policy_check.scale_headroom)."""
        assert workflow_id == "wf1"
        self.asked.append((current, wanted))
        if self.quota_copies is None or wanted <= self.quota_copies:
            return ScaleAllowance(allowed=wanted)
        return ScaleAllowance(allowed=max(current, self.quota_copies), refusal=(
            f"Refused by policy user/alice: max_copies {self.quota_copies}, {self.quota_copies} in use, "
            "this needs 1 more."))


class FakeHandle:
    def __init__(self) -> None:
        self.desired = 2
        self.scaled: list[tuple[int, str]] = []

    async def query(self, *_: Any, **__: Any) -> PoolStatus:
        return PoolStatus(workflow_id="wf1", phase=Phase.READY, desired_copies=self.desired, copies=(), events=())

    async def execute_update(self, _: Any, request: Any) -> None:
        self.scaled.append((request.replicas, request.reason))
        self.desired = request.replicas


class FakeTemporal:
    def __init__(self) -> None:
        self.handle = FakeHandle()

    def get_workflow_handle(self, _: str) -> FakeHandle:
        return self.handle


async def tick_until(autoscaler: Autoscaler, api: FakeApi, decision: str, timeout_s: float = 10) -> ScalingExplanation:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        await autoscaler.tick()
        if api.recorded and api.recorded[-1].decision == decision:
            return api.recorded[-1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {decision} in {timeout_s} s; last: {api.recorded[-1] if api.recorded else None}")


def test_queue_scales_out_and_a_silent_copy_holds_scale_in(two_copies: list[Copy]) -> None:
    async def scenario() -> None:
        api = FakeApi({"c0": two_copies[0].url, "c1": two_copies[1].url})
        temporal = FakeTemporal()
        autoscaler = Autoscaler(api, temporal, holder="test")  # type: ignore[arg-type]
        try:
            for copy in two_copies:
                copy.waiting = 9
            out = await tick_until(autoscaler, api, "scale_out")
            assert out.desired == 3 and "ScaleOutQueue=4" in out.reason and out.signal.queue_depth == 9
            assert temporal.handle.scaled[-1][0] == 3 and "ScaleOutQueue" in temporal.handle.scaled[-1][1]
            temporal.handle.desired = 2
            for copy in two_copies:
                copy.waiting = 0
            two_copies[1].stop()  # the copy stops answering, still listed ready: its metrics go stale
            scraped = autoscaler.copies.metrics("c1")
            assert scraped is not None and scraped.scraped_at is not None
            scraped.scraped_at -= 40  # as if its last good scrape were 40 s ago (no fixed sleep)
            held = await tick_until(autoscaler, api, "hold")
            assert held.signal.stale_copies == ["c1"] and held.desired == 2
            assert re.search(r"copy c1's metrics are 4\d s old", held.reason), held.reason
            assert "scale-in waits for fresh metrics from every ready copy" in held.reason
            until = time.monotonic() + 1.0  # twice ScaleInSeconds=0.5 of a quiet queue: held every tick
            while time.monotonic() < until:
                await autoscaler.tick()
                assert api.recorded[-1].decision == "hold" and temporal.handle.desired == 2
                await asyncio.sleep(0.1)
        finally:
            await autoscaler.copies.aclose()

    asyncio.run(scenario())


def test_a_scale_out_a_quota_refuses_is_recorded_as_the_decision_and_not_sent(two_copies: list[Copy]) -> None:
    async def scenario() -> None:
        api = FakeApi({"c0": two_copies[0].url, "c1": two_copies[1].url}, quota_copies=2)
        temporal = FakeTemporal()
        autoscaler = Autoscaler(api, temporal, holder="test")  # type: ignore[arg-type]
        try:
            for copy in two_copies:
                copy.waiting = 9
            refused = await tick_until(autoscaler, api, "refused")
            assert refused.desired == 2 and api.asked[-1] == (2, 3)
            assert refused.reason.startswith("Refused by policy user/alice: max_copies 2, 2 in use, this needs 1 more. "
                                             "It wanted 3 copies: "), refused.reason
            assert "ScaleOutQueue=4" in refused.reason
            await autoscaler.tick()  # the next tick decides again, and is refused again: nothing is sent
            assert temporal.handle.scaled == [] and temporal.handle.desired == 2
            assert api.recorded[-1].decision == "refused"
            api.quota_copies = None  # the quota is raised: the same queue scales the pool out
            out = await tick_until(autoscaler, api, "scale_out")
            assert out.desired == 3 and temporal.handle.scaled[-1][0] == 3
        finally:
            await autoscaler.copies.aclose()

    asyncio.run(scenario())
