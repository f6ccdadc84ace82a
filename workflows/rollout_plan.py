"""A rollout's next move, decided from what the pool's copies of both revisions are doing (pure: no
Temporal call, so that it is tested on its own and replays alike): how many copies each revision should
run, how the endpoint proxy should split traffic between them, and which phase the rollout is in.

The rules are Kubernetes' and Argo Rollouts' as serving teams know them: a new copy counts once it has
been ready for MinReady; rolling adds at most MaxSurge copies above the desired size and keeps at least
desired − MaxUnavailable serving, and never removes the last ready old copy while no new copy counts;
blue-green builds the whole new set before the switch; a canary's steps move traffic only once its set is
up. A rollback restores the old revision's copies first and only then stops the new ones."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from berth.contracts import Rollout, RolloutKind, RolloutPhase


@dataclass(frozen=True)
class Side:
    """One revision's copies in the pool."""

    running: int = 0  # copies running at all, draining ones included
    active: int = 0  # running and not draining: they count toward the revision's size
    ready: int = 0  # ready and not draining
    settled: int = 0  # ready (not draining) for at least MinReady


@dataclass(frozen=True)
class Plan:
    want_old: int
    want_new: int
    traffic: dict[int, int] | None  # None: every ready copy alike (by copy count)
    phase: RolloutPhase
    message: str
    finished: RolloutPhase | None = None  # COMPLETE or ROLLED_BACK: the rollout ends now
    switch: bool = False  # all traffic moved to the new revision now (switched_at starts)
    step_up: bool = False  # the canary's current step was held long enough: take the next
    step_live: bool = False  # the canary's set is up: its step's traffic applies from now


def plan(rollout: Rollout, desired: int, old: Side, new: Side, now: datetime) -> Plan:
    phase = rollout.phase
    if phase is RolloutPhase.PAUSED:
        return Plan(old.active, new.active, rollout.traffic or None, phase,
                    rollout.paused_reason or "paused")
    if phase is RolloutPhase.ROLLING_BACK:
        return _rolling_back(rollout, desired, old, new)
    if rollout.promoted or rollout.phase is RolloutPhase.SWITCHED:
        return _switch(rollout, desired, old, new, now)
    if rollout.strategy.kind is RolloutKind.ROLLING:
        return _rolling(rollout, desired, old, new)
    if rollout.strategy.kind is RolloutKind.BLUE_GREEN:
        return _switch(rollout, desired, old, new, now)
    return _canary(rollout, desired, old, new, now)


def _rolling(rollout: Rollout, desired: int, old: Side, new: Side) -> Plan:
    strategy = rollout.strategy
    if new.settled >= desired and old.running == 0:
        return Plan(0, desired, None, RolloutPhase.COMPLETE, f"all {desired} copies on revision "
                    f"{rollout.to_revision}", finished=RolloutPhase.COMPLETE)
    want_new = min(desired, max(0, desired + strategy.max_surge - old.active))
    want_old = min(old.active, max(0, desired - strategy.max_unavailable - new.settled))
    if new.settled == 0 and old.active > 0:
        want_old = max(want_old, 1)  # a failing new revision never takes the last old copy with it
    message = (f"{new.settled} of {desired} new copies ready for {strategy.min_ready_s:g} s; "
               f"{old.active} old ones serving")
    return Plan(want_old, want_new, None, RolloutPhase.ROLLING, message)


def _switch(rollout: Rollout, desired: int, old: Side, new: Side, now: datetime) -> Plan:
    """Blue-green (and a promotion): the whole new set first, then all traffic at once; the old set stays
    for the rollback window (none after a promotion), then it is stopped."""
    old_rev, new_rev = rollout.from_revision, rollout.to_revision
    if rollout.switched_at is None:
        up = new.settled >= desired
        traffic = {old_rev: 100, new_rev: 0} if not up else {old_rev: 0, new_rev: 100}
        return Plan(max(desired, old.active) if not rollout.promoted else old.active, desired, traffic,
                    RolloutPhase.SWITCHED if up else RolloutPhase.BUILDING,
                    f"{new.settled} of {desired} new copies ready; traffic stays on revision {old_rev}",
                    switch=up)
    window = 0.0 if rollout.promoted else rollout.strategy.rollback_window_s
    held = (now - rollout.switched_at).total_seconds()
    if held < window:
        return Plan(old.active, desired, {old_rev: 0, new_rev: 100}, RolloutPhase.SWITCHED,
                    f"all traffic on revision {new_rev}; revision {old_rev} kept "
                    f"{window - held:.0f} s more for a rollback")
    if old.running == 0:
        return Plan(0, desired, None, RolloutPhase.COMPLETE, f"all traffic and {desired} copies on revision "
                    f"{new_rev}", finished=RolloutPhase.COMPLETE)
    return Plan(0, desired, {old_rev: 0, new_rev: 100}, RolloutPhase.SWITCHED,
                f"stopping revision {old_rev}'s copies")


def _canary(rollout: Rollout, desired: int, old: Side, new: Side, now: datetime) -> Plan:
    strategy = rollout.strategy
    percent = strategy.steps[min(rollout.step, len(strategy.steps) - 1)]
    if percent >= 100:
        return _switch(rollout, desired, old, new, now)
    old_rev, new_rev = rollout.from_revision, rollout.to_revision
    size = max(1, math.ceil(desired * percent / 100))
    want_old = max(desired, old.active)
    if new.settled < size:
        return Plan(want_old, size, {old_rev: 100, new_rev: 0}, RolloutPhase.SHIFTING,
                    f"step {rollout.step + 1}: {new.settled} of {size} canary copies ready")
    split = {old_rev: 100 - percent, new_rev: percent}
    if rollout.step_started_at is None:
        return Plan(want_old, size, split, RolloutPhase.SHIFTING, f"step {rollout.step + 1}: {percent} %",
                    step_live=True)
    held = (now - rollout.step_started_at).total_seconds()
    message = (f"step {rollout.step + 1} of {len(strategy.steps)}: {percent} % to revision {new_rev}, "
               f"held {held:.0f} of {strategy.step_hold_s:g} s")
    return Plan(want_old, size, split, RolloutPhase.SHIFTING, message, step_up=held >= strategy.step_hold_s)


def _rolling_back(rollout: Rollout, desired: int, old: Side, new: Side) -> Plan:
    old_rev, new_rev = rollout.from_revision, rollout.to_revision
    restored = old.ready >= max(1, desired - rollout.strategy.max_unavailable) or desired == 0
    if restored and new.running == 0:
        return Plan(desired, 0, None, RolloutPhase.ROLLED_BACK, f"back on revision {old_rev}",
                    finished=RolloutPhase.ROLLED_BACK)
    message = (f"{old.ready} of {desired} revision {old_rev} copies ready; revision {new_rev}'s stop "
               + ("now" if restored else "once they are"))
    return Plan(desired, 0 if restored else new.active, {old_rev: 100, new_rev: 0}, RolloutPhase.ROLLING_BACK,
                message)
