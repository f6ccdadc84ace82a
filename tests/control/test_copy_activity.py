"""CopyActivity: a pool's idleness from its copies' own vLLM counters (traffic past every proxy counts),
bounded scrapes, no credential sent; CountingCopies folds it into the autoscaler's idle judgement."""

from __future__ import annotations

import asyncio

import httpx

from control.autoscaler import CountingCopies, FrontDoorRates, PoolMemory, PoolPolicy, decide
from control.copy_activity import MAX_METRICS_BYTES, CopyActivity, CopyTarget

COPY = CopyTarget(endpoint_id="ep1", copy_id="c1", url="http://copy-1:8000", api_key="sk-berth-replica-c1")
ZERO_AFTER_6 = PoolPolicy(min_replicas=0, max_replicas=1, scale_to_zero_after_s=6, rate_autoscaling=False)


def metrics(succeeded: float, running: float = 0.0) -> str:
    return ("# HELP vllm:request_success_total Count of successfully processed requests.\n"
            f'vllm:request_success_total{{finished_reason="stop",model_name="m"}} {succeeded}\n'
            'vllm:request_success_total{finished_reason="length",model_name="m"} 0.0\n'
            f'vllm:num_requests_running{{model_name="m"}} {running}\n'
            'vllm:num_requests_waiting{model_name="m"} 0.0\n')


class FakeCopy:
    """A copy's /metrics as a MockTransport: counters the test moves; the headers it was sent."""

    def __init__(self) -> None:
        self.succeeded, self.running = 0.0, 0.0
        self.body: str | None = None
        self.headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        assert request.url.path == "/metrics"
        return httpx.Response(200, text=self.body or metrics(self.succeeded, self.running))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_requests_past_every_proxy_keep_the_pool_awake() -> None:
    """The reported bug: gateway traffic reaches the copies only; the front door saw nothing for 20 s."""
    async def scenario() -> None:
        copy, clock = FakeCopy(), Clock()
        copies = CopyActivity(transport=httpx.MockTransport(copy), clock=clock)
        front_door = FrontDoorRates()
        front_door.load("ep1", 100.0)  # the front door first sees the endpoint: its idle clock starts
        source = CountingCopies(front_door, copies)
        await copies.observe([COPY])  # baseline: a lifetime total is not recent work
        assert copies.idle_s("ep1", 100.0) == float("inf")
        for second in range(101, 121):  # a request every 4 s through the gateway, for 20 s
            clock.now = float(second)
            if second % 4 == 0:
                copy.succeeded += 1
            await copies.observe([COPY])
            assert decide(ZERO_AFTER_6, 1, source.load("ep1", clock.now), PoolMemory(), clock.now) is None
        assert front_door.load("ep1", 120.0).idle_s == 20.0  # what alone decided before
        # The load stops: ScaleToZeroAfter later the pool goes to zero, and says why.
        for second in range(121, 127):
            clock.now = float(second)
            await copies.observe([COPY])
        decision = decide(ZERO_AFTER_6, 1, source.load("ep1", 126.0), PoolMemory(), 126.0)
        assert decision is not None and decision[0] == 0 and "ScaleToZeroAfter=6" in decision[1]
        # The copy's own key and nothing else: its port answers only Berth (rank/berth_rank_guard.py).
        assert all(h["authorization"] == "Bearer sk-berth-replica-c1" and "cookie" not in h for h in copy.headers)
        await copies.aclose()

    asyncio.run(scenario())


def test_a_request_still_running_is_work() -> None:
    async def scenario() -> None:
        copy, clock = FakeCopy(), Clock()
        copies = CopyActivity(transport=httpx.MockTransport(copy), clock=clock)
        copy.running = 1  # a long generation: nothing completed, yet busy
        await copies.observe([COPY])
        clock.now = 130.0
        await copies.observe([COPY])
        assert copies.idle_s("ep1", 130.0) == 0.0
        await copies.aclose()

    asyncio.run(scenario())


def test_an_oversized_or_failing_scrape_is_no_evidence_and_forgotten_copies_go() -> None:
    async def scenario() -> None:
        copy, clock = FakeCopy(), Clock()
        copies = CopyActivity(transport=httpx.MockTransport(copy), clock=clock)
        await copies.observe([COPY])
        copy.body = metrics(5.0, running=3.0) + "#" * (MAX_METRICS_BYTES + 1)  # claims work, at length
        await copies.observe([COPY])
        assert copies.idle_s("ep1", clock.now) == float("inf")
        down = CopyActivity(transport=httpx.MockTransport(lambda _r: httpx.Response(503)), clock=clock)
        await down.observe([COPY])
        assert down.idle_s("ep1", clock.now) == float("inf")
        copy.body, copy.running = None, 1
        await copies.observe([COPY])
        assert copies.idle_s("ep1", clock.now) == 0.0
        await copies.observe([])  # the pool has no copy left: nothing kept about it
        assert copies.idle_s("ep1", clock.now) == float("inf")
        await copies.aclose()
        await down.aclose()

    asyncio.run(scenario())
