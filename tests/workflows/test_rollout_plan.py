"""The rollout planner on its own: each strategy's sizes, splits and phases from the copies' states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from berth.contracts import Rollout, RolloutKind, RolloutPhase, RolloutStrategy
from workflows.rollout_plan import Side, plan

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def rollout(kind: RolloutKind = RolloutKind.ROLLING, phase: RolloutPhase = RolloutPhase.ROLLING,
            **fields: object) -> Rollout:
    strategy = RolloutStrategy(kind=kind, **{k: v for k, v in fields.items() if k in RolloutStrategy.model_fields})
    rest = {k: v for k, v in fields.items() if k not in RolloutStrategy.model_fields}
    return Rollout(from_revision=1, to_revision=2, strategy=strategy, phase=phase, started_at=NOW,
                   updated_at=NOW, **rest)


def side(n: int, ready: int | None = None, settled: int | None = None, draining: int = 0) -> Side:
    ready = n - draining if ready is None else ready
    return Side(running=n, active=n - draining, ready=ready, settled=ready if settled is None else settled)


def test_rolling_surges_one_copy_then_drains_one_old_copy_per_settled_new_one() -> None:
    first = plan(rollout(), 3, side(3), side(0), NOW)
    assert (first.want_old, first.want_new, first.traffic) == (3, 1, None)
    settled = plan(rollout(), 3, side(3), side(1), NOW)
    assert (settled.want_old, settled.want_new) == (2, 1)
    drained = plan(rollout(), 3, side(2), side(1), NOW)
    assert (drained.want_old, drained.want_new) == (2, 2)
    done = plan(rollout(), 3, side(0), side(3), NOW)
    assert done.finished is RolloutPhase.COMPLETE


def test_rolling_never_takes_the_last_old_copy_while_no_new_copy_counts() -> None:
    decided = plan(rollout(max_unavailable=5), 2, side(2), side(1, ready=0, settled=0), NOW)
    assert decided.want_old == 1 and decided.want_new == 1  # MaxUnavailable=5, yet one old copy stays
    unsettled = plan(rollout(), 1, side(1), side(1, ready=1, settled=0), NOW)
    assert unsettled.want_old == 1


def test_blue_green_builds_the_whole_set_before_the_switch_and_keeps_the_old_for_the_window() -> None:
    strategy = {"kind": RolloutKind.BLUE_GREEN, "rollback_window_s": 60}
    building = plan(rollout(**strategy), 2, side(2), side(1), NOW)  # type: ignore[arg-type]
    assert building.phase is RolloutPhase.BUILDING and building.traffic == {1: 100, 2: 0}
    assert (building.want_old, building.want_new, building.switch) == (2, 2, False)
    up = plan(rollout(**strategy), 2, side(2), side(2), NOW)  # type: ignore[arg-type]
    assert up.switch and up.traffic == {1: 0, 2: 100}
    held = plan(rollout(**strategy, switched_at=NOW), 2, side(2), side(2), NOW + timedelta(seconds=30))  # type: ignore[arg-type]
    assert held.want_old == 2 and "30 s more" in held.message
    after = plan(rollout(**strategy, switched_at=NOW), 2, side(2), side(2), NOW + timedelta(seconds=61))  # type: ignore[arg-type]
    assert after.want_old == 0 and after.finished is None


def test_a_canary_step_sets_its_split_only_once_its_copies_are_up_and_moves_on_after_the_hold() -> None:
    strategy = {"kind": RolloutKind.CANARY, "steps": (25, 100), "step_hold_s": 60}
    waiting = plan(rollout(phase=RolloutPhase.SHIFTING, **strategy), 4, side(4), side(0), NOW)  # type: ignore[arg-type]
    assert waiting.want_new == 1 and waiting.traffic == {1: 100, 2: 0} and waiting.want_old == 4
    live = plan(rollout(phase=RolloutPhase.SHIFTING, **strategy), 4, side(4), side(1), NOW)  # type: ignore[arg-type]
    assert live.step_live and live.traffic == {1: 75, 2: 25}
    holding = rollout(phase=RolloutPhase.SHIFTING, step_started_at=NOW, **strategy)  # type: ignore[arg-type]
    assert not plan(holding, 4, side(4), side(1), NOW + timedelta(seconds=59)).step_up
    assert plan(holding, 4, side(4), side(1), NOW + timedelta(seconds=60)).step_up


def test_a_rollback_restores_the_old_revision_before_it_stops_the_new_one() -> None:
    back = rollout(phase=RolloutPhase.ROLLING_BACK)
    restoring = plan(back, 2, side(1), side(2), NOW)
    assert (restoring.want_old, restoring.want_new, restoring.traffic) == (2, 2, {1: 100, 2: 0})
    restored = plan(back, 2, side(2), side(2), NOW)
    assert restored.want_new == 0 and restored.finished is None
    assert plan(back, 2, side(2), side(0), NOW).finished is RolloutPhase.ROLLED_BACK


def test_a_paused_rollout_freezes_both_sizes_and_its_split() -> None:
    paused = rollout(phase=RolloutPhase.PAUSED, paused_reason="paused by alice", traffic={1: 100, 2: 0})
    decided = plan(paused, 3, side(2), side(1), NOW)
    assert (decided.want_old, decided.want_new, decided.traffic, decided.message) == (2, 1, {1: 100, 2: 0},
                                                                                       "paused by alice")
