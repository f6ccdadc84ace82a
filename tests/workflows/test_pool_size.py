"""The pool's size decider on its own: each revision's wanted size, the copies that count, which to start
and which to drain (not-yet-serving first, then the newest), and a rollout planner's view of a revision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from berth.contracts import Rollout, RolloutPhase
from workflows.payloads import CopyInfo, CopyStatus
from workflows.pool_size import Resize, active, resize, revision_of, side, unbalanced, wants
from workflows.pool_state import PoolState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pool(desired: int, ready: tuple[str, ...] = (), starting: tuple[str, ...] = ()) -> PoolState:
    state = PoolState(desired=desired)
    for copy_id in ready:
        state.copies[copy_id] = CopyInfo(copy_id=copy_id, status=CopyStatus.READY)
    for copy_id in starting:
        state.copies[copy_id] = CopyInfo(copy_id=copy_id, status=CopyStatus.STARTING)
    return state


def rolling(state: PoolState, want: tuple[int, int] | None, phase: RolloutPhase = RolloutPhase.ROLLING) -> None:
    state.rollout = Rollout(from_revision=1, to_revision=2, phase=phase, started_at=NOW, updated_at=NOW)
    state.want = want


def test_a_pool_below_its_size_starts_the_missing_copies() -> None:
    state = pool(3, ready=("p.copy-0",))
    assert resize(state, ["p.copy-0"], paused=False) == (Resize(revision=1, start=2),)
    assert unbalanced(state, ["p.copy-0"], paused=False)


def test_nothing_starts_while_stopping_or_backing_off() -> None:
    state = pool(2)
    assert resize(state, [], paused=True) == (Resize(revision=1),)
    assert not unbalanced(state, [], paused=True)  # the back-off's end wakes the loop, not the shortfall
    state.stop_requested = True
    assert resize(state, [], paused=False) == (Resize(revision=1),)


def test_scale_in_drains_copies_not_yet_serving_first_then_the_newest() -> None:
    running = ["p.copy-0", "p.copy-1", "p.copy-2", "p.copy-3"]
    state = pool(1, ready=("p.copy-0", "p.copy-1", "p.copy-3"), starting=("p.copy-2",))
    assert resize(state, running, paused=False) == (Resize(revision=1, drain=("p.copy-2", "p.copy-3", "p.copy-1")),)
    state.draining.append("p.copy-2")  # a draining copy no longer counts, and is not drained twice
    assert active(state, running, 1) == 3
    assert resize(state, running, paused=False) == (Resize(revision=1, drain=("p.copy-3", "p.copy-1")),)


def test_a_balanced_pool_does_nothing() -> None:
    state = pool(2, ready=("p.copy-0", "p.copy-1"))
    assert resize(state, ["p.copy-0", "p.copy-1"], paused=False) == (Resize(revision=1),)
    assert not unbalanced(state, ["p.copy-0", "p.copy-1"], paused=False)


def test_during_a_rollout_each_revision_is_sized_on_its_own() -> None:
    state = pool(2, ready=("p.copy-0", "p.copy-1"))
    rolling(state, None)
    assert wants(state) == {1: 2}  # until the driver's first plan, the serving size
    rolling(state, (1, 2))
    state.revision_of = {"p.copy-0": 1, "p.copy-1": 1}
    assert revision_of(state, "p.copy-9") == 1  # not listed: the pool's revision
    assert wants(state) == {1: 1, 2: 2}
    assert resize(state, ["p.copy-0", "p.copy-1"], paused=False) == (
        Resize(revision=1, drain=("p.copy-1",)), Resize(revision=2, start=2))
    rolling(state, (1, 2), RolloutPhase.COMPLETE)  # a finished rollout sizes the pool again
    assert wants(state) == {1: 2}


def test_a_rollout_counts_a_copy_once_ready_for_min_ready() -> None:
    state = pool(2, ready=("p.copy-0", "p.copy-1", "p.copy-2"), starting=("p.copy-3",))
    state.revision_of = {"p.copy-0": 1, "p.copy-1": 2, "p.copy-2": 2, "p.copy-3": 2}
    state.ready_since = {"p.copy-1": NOW - timedelta(seconds=30), "p.copy-2": NOW - timedelta(seconds=5)}
    state.draining.append("p.copy-0")
    old, new = side(state, 1, 10.0, NOW), side(state, 2, 10.0, NOW)
    assert (old.running, old.active, old.ready, old.settled) == (1, 0, 0, 0)
    assert (new.running, new.active, new.ready, new.settled) == (3, 3, 2, 1)
