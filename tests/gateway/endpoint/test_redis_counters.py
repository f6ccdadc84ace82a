"""The limits engine on counters shared through a real Redis (tests/gateway/redis_server.py): two limiters,
as two proxies would hold, share one set of counts; an admit is all or nothing; an outage refuses with a
503 and, once Redis is back, nothing was counted twice or lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from berth.contracts import LimitPolicy
from gateway.endpoint.counters import IN_FLIGHT, Check
from gateway.endpoint.limits import Asked, Limiter, Refused, Ticket
from gateway.endpoint.redis_counters import RedisCounters
from tests.gateway.redis_server import RedisServer

pytestmark = pytest.mark.redis

KEYED = Asked(endpoint_id="ep1", user="alice", org="acme", key_id="k1", key_max_concurrent=2,
              key_tokens_per_minute=1000)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
async def two_proxies(redis_server: RedisServer) -> AsyncIterator[tuple[Limiter, Limiter]]:
    policy = LimitPolicy.model_validate({"user": {"requests_per_minute": 100}})
    first, second = RedisCounters(redis_server.url), RedisCounters(redis_server.url)
    yield Limiter(policy, first), Limiter(policy, second)
    await first.close()
    await second.close()


async def test_a_third_concurrent_request_is_refused_whichever_proxy(two_proxies: tuple[Limiter, Limiter]) -> None:
    one, two = two_proxies
    first = await one.admit(KEYED)
    second = await two.admit(KEYED)
    for proxy in (one, two):
        with pytest.raises(Refused) as refused:
            await proxy.admit(KEYED)
        assert (refused.value.status, refused.value.limit) == (429, "max_concurrent")
        assert "API key k1" in refused.value.message
    await first.finish(10)
    await first.finish(10)  # idempotent: releases one slot, charges once
    third = await two.admit(KEYED)  # the slot one proxy released, taken through the other
    with pytest.raises(Refused):
        await one.admit(KEYED)
    await second.finish(0)
    await third.finish(0)
    await asyncio.gather(*(ticket.finish(0) for ticket in [await one.admit(KEYED), await two.admit(KEYED)]))


async def test_tokens_charged_through_one_proxy_count_on_the_other(two_proxies: tuple[Limiter, Limiter]) -> None:
    one, two = two_proxies
    ticket = await one.admit(KEYED)
    await ticket.finish(999)
    await (await two.admit(KEYED)).finish(1)  # 999 < 1000: under it
    with pytest.raises(Refused) as refused:
        await one.admit(KEYED)
    assert refused.value.limit == "tokens_per_minute" and refused.value.retry_after_s is not None


async def test_admit_is_all_or_nothing_across_proxies(redis_server: RedisServer) -> None:
    policy = LimitPolicy.model_validate({"org": {"requests_per_minute": 10}, "user": {"requests_per_minute": 2}})
    counters = [RedisCounters(redis_server.url, prefix="t:"), RedisCounters(redis_server.url, prefix="t:")]
    one, two = (Limiter(policy, c) for c in counters)
    await one.admit(KEYED)
    await two.admit(KEYED)
    for _ in range(5):  # the user scope refuses; the org scope, checked first, must not count these
        with pytest.raises(Refused, match="user alice"):
            await one.admit(KEYED)
    for user in range(8):  # the org still has exactly 8 of its 10 left
        await two.admit(Asked(endpoint_id="ep1", user=f"u{user}", org="acme"))
    with pytest.raises(Refused, match="org acme"):
        await one.admit(Asked(endpoint_id="ep1", user="u9", org="acme"))
    for c in counters:
        await c.close()


async def test_requests_per_minute_shared(two_proxies: tuple[Limiter, Limiter]) -> None:
    one, two = two_proxies
    asked = Asked(endpoint_id="ep1", user="carol")
    for index in range(100):
        await (one if index % 2 else two).admit(asked)
    with pytest.raises(Refused) as refused:
        await two.admit(asked)
    assert refused.value.limit == "requests_per_minute" and 1 <= (refused.value.retry_after_s or 0) <= 60


async def test_redis_down_fails_closed_and_nothing_is_counted_twice(
        redis_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    policy = LimitPolicy()
    counters = RedisCounters(redis_server.url, timeout_s=0.5)
    limiter = Limiter(policy, counters)
    held = await limiter.admit(KEYED)
    redis_server.stop()
    for _ in range(3):
        with pytest.raises(Refused) as refused:
            await limiter.admit(KEYED)
        assert (refused.value.status, refused.value.limit) == (503, "shared_counters")
        assert "unreachable" in refused.value.message and refused.value.retry_after_s == 1
    with caplog.at_level(logging.WARNING, logger="gateway.endpoint.redis_counters"):
        await held.finish(5)  # cannot reach Redis: logged, not raised
        other = await _admitted_before(limiter)
        await other.finish(5)
    assert sum("cannot reach Redis" in record.message for record in caplog.records) == 1  # once per outage
    redis_server.start()  # back, empty (nothing saved): the script is loaded again on first use
    first, second = await limiter.admit(KEYED), await limiter.admit(KEYED)  # the refused ones left no slot
    with pytest.raises(Refused) as refused:
        await limiter.admit(KEYED)
    assert refused.value.limit == "max_concurrent"  # and none was counted twice
    await first.finish(0)
    await second.finish(0)
    await held.finish(0)  # finished already: releases nothing now that Redis is back
    await (await limiter.admit(KEYED)).finish(0)
    await counters.close()


async def _admitted_before(limiter: Limiter) -> Ticket:
    """A ticket for a request admitted before the outage, finished during it (its finish can't reach Redis)."""
    return Ticket(limiter.counters, (), (Check("max_concurrent:key:k1", IN_FLIGHT, 2, 0),), "before-outage")


async def test_in_flight_slots_of_a_dead_proxy_expire_with_the_lease(redis_server: RedisServer) -> None:
    counters = RedisCounters(redis_server.url, lease_s=0.3)
    limiter = Limiter(LimitPolicy(), counters)
    await limiter.admit(KEYED)
    await limiter.admit(KEYED)  # never finished: the proxy holding them "died"
    with pytest.raises(Refused):
        await limiter.admit(KEYED)
    deadline = asyncio.get_running_loop().time() + 5
    while True:  # the condition: a slot frees once the lease has passed
        try:
            await limiter.admit(KEYED)
            break
        except Refused:
            assert asyncio.get_running_loop().time() < deadline, "slots never expired"
            await asyncio.sleep(0.05)
    await counters.close()


async def test_a_caller_cancelled_mid_admit_leaves_no_slot_held(redis_server: RedisServer) -> None:
    """A client that disconnects while its admit is on the wire: the slot the script took is given back."""
    counters = RedisCounters(redis_server.url)
    limiter = Limiter(LimitPolicy(), counters)
    script, gate, sent, counted = counters._admit, asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def held_on_the_wire(**kwargs: object) -> object:
        sent.set()
        await gate.wait()
        answer = await script(**kwargs)  # type: ignore[arg-type]
        counted.set()
        return answer

    counters._admit = held_on_the_wire  # type: ignore[assignment]
    request = asyncio.create_task(limiter.admit(KEYED))
    await asyncio.wait_for(sent.wait(), 5)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    gate.set()  # the script runs and counts after its caller left
    await asyncio.wait_for(counted.wait(), 5)
    counters._admit = script  # type: ignore[assignment]
    await _until_no_slot_held(counters)  # the abandoned slot is given back
    tickets = [await limiter.admit(KEYED), await limiter.admit(KEYED)]  # both slots free
    for ticket in tickets:
        await ticket.finish(0)
    await counters.close()


async def test_a_finish_whose_caller_is_cancelled_still_reaches_redis(redis_server: RedisServer) -> None:
    counters = RedisCounters(redis_server.url)
    limiter = Limiter(LimitPolicy(), counters)
    ticket = await limiter.admit(KEYED)
    script, gate, started = counters._finish, asyncio.Event(), asyncio.Event()

    async def slow_finish(**kwargs: object) -> object:
        started.set()
        await gate.wait()
        return await script(**kwargs)  # type: ignore[arg-type]

    counters._finish = slow_finish  # type: ignore[assignment]
    finishing = asyncio.create_task(ticket.finish(5))
    await asyncio.wait_for(started.wait(), 5)
    finishing.cancel()  # the request's task is cancelled while its finish is on its way
    with pytest.raises(asyncio.CancelledError):
        await finishing
    gate.set()
    await _until_no_slot_held(counters)
    await counters.close()


async def _until_no_slot_held(counters: RedisCounters, timeout_s: float = 5.0) -> None:
    """Wait (polling Redis: no event to wait on across processes) until key k1 holds no in-flight slot."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    for _ in iter(int, 1):
        if not await counters._redis.zcard("berth:limits:max_concurrent:key:k1"):
            return
        assert asyncio.get_running_loop().time() < deadline, "a slot is still held"
        await asyncio.sleep(0.01)
