"""Engine liveness on its own: failures count only in a row and only once the engine has answered; and a
rank with no probe is still stopped when its copy stops."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from activities.health import FailureStreak, until_hung
from activities.ranks import _unless_hung
from workflows.payloads import HealthCheck


def test_a_success_starts_the_count_again() -> None:
    streak = FailureStreak(limit=3)
    assert [streak.record(f) for f in ("timeout", "timeout", None, "timeout", "timeout")] == [False] * 5
    assert streak.record("answered 503") and streak.count == 3 and streak.last == "answered 503"


async def test_until_hung_waits_for_a_first_answer_then_counts_failures_in_a_row() -> None:
    answers = iter([503, 503, 503, 200, 503, 200, 500, 500, 500])
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(next(answers))

    check = HealthCheck(url="http://engine", interval_s=0.001, timeout_s=1.0, failures_to_fail=3)
    reason = await until_hung(check, transport=httpx.MockTransport(handler))
    assert reason == "/health failed 3 times in a row (answered 500)"
    assert seen == ["/health"] * 9  # the three 503s of start-up never counted


async def test_the_first_failure_takes_the_copy_out_of_routing_and_an_answer_brings_it_back() -> None:
    answers = iter([200, 503, 200, 500, 500, 500])
    routable: list[bool] = []

    async def on_routable(value: bool) -> None:
        routable.append(value)

    check = HealthCheck(url="http://engine", interval_s=0.001, failures_to_fail=3)
    transport = httpx.MockTransport(lambda request: httpx.Response(next(answers)))
    assert await until_hung(check, on_routable, transport=transport) == "/health failed 3 times in a row (answered 500)"
    assert routable == [False, True, False]


async def test_an_unanswered_probe_is_a_timeout() -> None:
    answered = iter([True])

    def first_answers(request: httpx.Request) -> httpx.Response:
        if next(answered, False):
            return httpx.Response(200)
        raise httpx.ReadTimeout("no answer", request=request)

    check = HealthCheck(url="http://engine", interval_s=0.001, failures_to_fail=2)
    reason = await until_hung(check, transport=httpx.MockTransport(first_answers))
    assert reason == "/health failed 2 times in a row (timeout after 2 s)"


async def _stopped_on_cancel(stopped: asyncio.Event) -> int | None:
    """A stand-in for Supervisor.watch: runs until cancelled, and then 'stops the process group'."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        stopped.set()
        raise
    return 0


@pytest.mark.parametrize("health", [None, HealthCheck(url="http://engine", interval_s=0, timeout_s=1.0,
                                                      failures_to_fail=3)])
async def test_a_stopped_rank_without_a_probe_is_stopped_too(health: HealthCheck | None) -> None:
    # Every rank but the leader has no probe, and none has with BERTH_HEALTH_CHECK_INTERVAL_S=0: the copy's
    # stop (its activity cancelled) must still reach the watch that stops the rank's process group.
    stopped = asyncio.Event()
    watching = asyncio.ensure_future(_stopped_on_cancel(stopped))

    async def routable(copy_id: str, on: bool) -> None:
        return None

    activity = asyncio.ensure_future(_unless_hung(watching, health, routable))
    await asyncio.sleep(0)  # the activity is waiting on its rank
    activity.cancel()
    with pytest.raises(asyncio.CancelledError):
        await activity
    assert stopped.is_set() and watching.cancelled()
