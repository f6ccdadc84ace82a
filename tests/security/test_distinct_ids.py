"""Issue 29, finding 11: a stranger sending a new `x-session-id` / `x-project-id` on every request cannot
grow the proxy's limit counters without bound. The windowed counters are capped (the oldest tenth forgotten
when full) and the cache of built checks is small; measured here with the cap lowered so that the test is
quick, and over a million ids by bench/distinct_ids.py (docs/performance.md)."""

from __future__ import annotations

import tracemalloc

import pytest

from berth.contracts import limit_policy_from
from gateway.endpoint import counters as counters_module
from gateway.endpoint import limits as limits_module
from gateway.endpoint.counters import MemoryCounters
from gateway.endpoint.limits import Asked, Limiter

POLICY = {"session": {"requests_per_minute": 100, "tokens_per_minute": 10_000},
          "project": {"requests_per_minute": 100}}
NOW = 1_800_000_000.0  # one minute throughout: nothing is swept by time


async def _send(limiter: Limiter, first: int, count: int) -> None:
    for i in range(first, first + count):
        ticket = await limiter.admit(Asked(endpoint_id="ep", session=f"s{i}", project=f"p{i}"))
        await ticket.finish(10)


async def test_distinct_session_and_project_ids_cost_bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counters_module, "MAX_WINDOWED", 3_000)
    limiter = Limiter(limit_policy_from(POLICY, "the test"), MemoryCounters(), clock=lambda: NOW)
    await _send(limiter, 0, 5_000)  # past the cap
    tracemalloc.start()
    try:
        await _send(limiter, 5_000, 5_000)
        settled, _ = tracemalloc.get_traced_memory()
        await _send(limiter, 10_000, 20_000)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert limiter.counters.size() <= 3_000  # type: ignore[attr-defined]
    assert after - settled < 512 * 1024, (settled, after)  # flat: 20,000 more ids, well under 1 KB each


async def test_a_member_the_counters_still_hold_is_still_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counters_module, "MAX_WINDOWED", 3_000)
    limiter = Limiter(limit_policy_from({"session": {"requests_per_minute": 2}}, "the test"), MemoryCounters(),
                      clock=lambda: NOW)
    for _ in range(2):
        await limiter.admit(Asked(endpoint_id="ep", session="steady"))
    with pytest.raises(limits_module.Refused):
        await limiter.admit(Asked(endpoint_id="ep", session="steady"))
