"""The pool's events are listed by when each happened (issue 29, finding 13): a copy's report that waited in
its outbox is placed before the adopting agent's later, sooner-arriving rank_readopted; equal times keep
their arrival order; a naive time reads as UTC; the list keeps the newest MAX_EVENTS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workflows.payloads import Event
from workflows.pool_state import MAX_EVENTS, PoolState

T0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)


def at(seconds: float, kind: str) -> Event:
    return Event(at=T0 + timedelta(seconds=seconds), kind=kind, message=kind)


def test_events_are_listed_by_when_they_happened_not_by_arrival() -> None:
    state = PoolState()
    for event in (at(0, "copy_ready"), at(12, "rank_readopted"), at(10, "rank_unresponsive"), at(12, "same_time"),
                  Event(at=(T0 + timedelta(seconds=11)).replace(tzinfo=None), kind="naive", message="naive")):
        state.append(event)
    assert [e.kind for e in state.events] == ["copy_ready", "rank_unresponsive", "naive", "rank_readopted",
                                              "same_time"]


def test_the_newest_events_are_kept() -> None:
    state = PoolState()
    for second in range(MAX_EVENTS + 5):
        state.append(at(second, f"e{second}"))
    state.append(at(-1, "too_old"))
    assert len(state.events) == MAX_EVENTS
    assert (state.events[0].kind, state.events[-1].kind) == ("e5", f"e{MAX_EVENTS + 4}")
