"""KeyGate against a counting stand-in for the API: verdicts and refusals are cached briefly (a flood of bad
keys asks the API once), never past `valid_until`; the request quota is reserved in batches (one at a time
near its end), ahead of need for a busy key; the API unreachable fails closed with a 503."""

from __future__ import annotations

import asyncio
import time

import pytest

from berth.contracts import KeyLimits, KeyReservation, KeyVerdict, KeyVerifyRequest
from berth.errors import AuthenticationError, UnavailableError
from gateway.endpoint.key_gate import KeyGate, KeyRefusal


class CountingApi:
    def __init__(self, quota: int | None = None, valid_until: float | None = None) -> None:
        self.verified = 0
        self.reservations: list[int] = []
        self.left = quota
        self.valid_until = valid_until
        self.down = False

    async def verify_key(self, request: KeyVerifyRequest) -> KeyVerdict:
        self.verified += 1
        if self.down:
            raise UnavailableError("The Berth API is not reachable.")
        if request.key != "bk_good":
            raise AuthenticationError("Unknown API key.")
        return KeyVerdict(key_id="key-1", owner="alice", org="acme", groups=["team"], endpoint_id="ep-a",
                          valid_until=self.valid_until, limits=KeyLimits(request_quota=self.left))

    async def reserve_key_requests(self, key_id: str, requests: int) -> KeyReservation:
        self.reservations.append(requests)
        assert self.left is not None
        granted = requests if requests <= self.left else min(1, self.left)
        self.left -= granted
        return KeyReservation(key_id=key_id, granted=granted, remaining=self.left)


async def test_a_flood_of_bad_keys_asks_the_api_once_and_verdicts_are_cached() -> None:
    api = CountingApi()
    gate = KeyGate(api)  # type: ignore[arg-type]
    for _ in range(100):
        with pytest.raises(KeyRefusal) as refused:
            await gate.verify("bk_bad", "ep-a")
        assert refused.value.status == 401
        assert (await gate.verify("bk_good", "ep-a")).key_id == "key-1"
    assert api.verified == 2


async def test_a_verdict_is_never_kept_past_its_valid_until() -> None:
    api = CountingApi(valid_until=time.time() - 1)  # as a rotated-out secret at the overlap's last moment
    gate = KeyGate(api)  # type: ignore[arg-type]
    await gate.verify("bk_good", "ep-a")
    await gate.verify("bk_good", "ep-a")
    assert api.verified == 2


async def test_the_cache_is_bounded() -> None:
    gate = KeyGate(CountingApi(), max_cached=10)  # type: ignore[arg-type]
    for number in range(50):
        with pytest.raises(KeyRefusal):
            await gate.verify(f"bk_bad{number}", "ep-a")
    assert len(gate._verdicts) <= 10


async def test_the_quota_is_reserved_in_batches_then_one_at_a_time_near_its_end() -> None:
    api = CountingApi(quota=600)
    gate = KeyGate(api)  # type: ignore[arg-type]
    verdict = await gate.verify("bk_good", "ep-a")
    admitted = 0
    with pytest.raises(KeyRefusal) as refused:
        while True:
            await gate.spend(verdict)
            admitted += 1
    assert admitted == 600 and refused.value.status == 429 and refused.value.code == "request_quota"
    assert api.reservations[0] == 32 and api.reservations[-2:] == [1, 1]
    assert len(api.reservations) < 100
    calls = len(api.reservations)
    with pytest.raises(KeyRefusal):
        await gate.spend(verdict)  # exhausted: refused here, the API not asked again at once
    assert len(api.reservations) == calls


async def test_the_api_unreachable_fails_closed_and_is_asked_again_next_time() -> None:
    api = CountingApi()
    api.down = True
    gate = KeyGate(api)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(KeyRefusal) as refused:
            await gate.verify("bk_good", "ep-a")
        assert refused.value.status == 503
    assert api.verified == 2


class SlowApi(CountingApi):
    """Each reservation takes 50 ms, as a busy control plane's might."""

    async def reserve_key_requests(self, key_id: str, requests: int) -> KeyReservation:
        await asyncio.sleep(0.05)  # the API's own latency, simulated: not a wait for a condition
        return await super().reserve_key_requests(key_id, requests)


async def test_a_busy_key_reserves_ahead_so_its_requests_do_not_wait_on_the_api() -> None:
    api = SlowApi(quota=100_000)
    gate = KeyGate(api)  # type: ignore[arg-type]
    verdict = await gate.verify("bk_good", "ep-a")
    waited = 0
    for _ in range(1000):
        started = time.monotonic()
        await gate.spend(verdict)
        waited += time.monotonic() - started > 0.04
        await asyncio.sleep(0.001)  # requests arriving at ~1000/s (pacing the load, not waiting on anything)
    # The first request waits; while the batches grow (32, 64, 128, ...) a few may outrun the refill.
    assert waited <= 4, f"{waited} requests waited on a reservation"
    assert max(api.reservations) > 32  # spent within a second: the batches grew
    assert max(api.reservations) <= 512


class SlowVerifyApi(CountingApi):
    async def verify_key(self, request: KeyVerifyRequest) -> KeyVerdict:
        await asyncio.sleep(0.05)  # the API's own latency, simulated
        return await super().verify_key(request)


async def test_a_busy_keys_requests_ask_the_api_once_when_its_verdict_expires() -> None:
    api = SlowVerifyApi()
    gate = KeyGate(api)  # type: ignore[arg-type]
    verdicts = await asyncio.gather(*(gate.verify("bk_good", "ep-a") for _ in range(32)))
    assert api.verified == 1 and {v.key_id for v in verdicts} == {"key-1"}
    refused = await asyncio.gather(*(gate.verify("bk_bad", "ep-a") for _ in range(8)), return_exceptions=True)
    assert api.verified == 2 and all(isinstance(r, KeyRefusal) and r.status == 401 for r in refused)
