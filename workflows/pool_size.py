"""A pool's size, decided (pure: no Temporal call, so it is tested on its own and replays alike): how many
copies each revision wants, how many of them count, and which copies to start or drain to get there."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from berth.contracts import RolloutPhase
from workflows.payloads import CopyStatus
from workflows.pool_state import PoolState
from workflows.rollout_plan import Side


@dataclass(frozen=True)
class Resize:
    """What the pool loop does for one revision: start `start` new copies, or drain these ones."""

    revision: int
    start: int = 0
    drain: tuple[str, ...] = ()


def rollout_active(state: PoolState) -> bool:
    rollout = state.rollout
    return rollout is not None and rollout.phase not in RolloutPhase.finished()


def revision_of(state: PoolState, copy_id: str) -> int:
    """The revision a copy serves (a copy not listed serves the pool's revision)."""
    return state.revision_of.get(copy_id, state.revision)


def wants(state: PoolState) -> dict[int, int]:
    """How many copies each revision should run (the pool loop places and drains to these)."""
    rollout = state.rollout
    if not rollout_active(state) or rollout is None or state.want is None:
        return {state.revision: state.desired}
    return {rollout.from_revision: state.want[0], rollout.to_revision: state.want[1]}


def active(state: PoolState, running: Collection[str], revision: int) -> int:
    """A revision's copies that count toward its size (not being drained)."""
    return sum(1 for c in running if c not in state.draining and revision_of(state, c) == revision)


def unbalanced(state: PoolState, running: Collection[str], paused: bool) -> bool:
    """A revision runs more copies than it wants, or fewer while no replacement back-off holds them."""
    for revision, want in wants(state).items():
        count = active(state, running, revision)
        if count > want or (count < want and not paused):
            return True
    return False


def scale_in_order(state: PoolState, running: Collection[str], count: int, revision: int) -> list[str]:
    """Which copies of a revision to scale in: ones not yet serving first (nothing to drain), then the newest."""
    candidates = [c for c in running if c not in state.draining and revision_of(state, c) == revision]
    serving = {c for c, info in state.copies.items() if info.status is CopyStatus.READY}
    candidates.sort(key=lambda c: (c in serving, -int(c.rsplit("-", 1)[-1])))
    return candidates[:count]


def resize(state: PoolState, running: Collection[str], paused: bool) -> tuple[Resize, ...]:
    """Per revision: the copies to start up to its size (none while stopping or backing off after a failure),
    or the surplus to drain. A revision either grows or shrinks, so each decision reads only its own copies."""
    decisions = []
    for revision, want in wants(state).items():
        count = active(state, running, revision)
        start = 0 if state.stop_requested or paused else max(0, want - count)
        surplus = count + start - want
        drain = scale_in_order(state, running, surplus, revision) if not state.stop_requested and surplus > 0 else []
        decisions.append(Resize(revision, start, tuple(drain)))
    return tuple(decisions)


def side(state: PoolState, revision: int, min_ready_s: float, now: datetime) -> Side:
    """One revision's copies as the rollout planner counts them: a copy counts once ready for MinReady."""
    copies = [c for c in state.copies.values() if revision_of(state, c.copy_id) == revision]
    draining = set(state.draining)
    ready = [c for c in copies if c.status is CopyStatus.READY and c.copy_id not in draining]
    settled = [c for c in ready if (now - state.ready_since.get(c.copy_id, now)).total_seconds() >= min_ready_s]
    return Side(running=len(copies), active=sum(1 for c in copies if c.copy_id not in draining),
                ready=len(ready), settled=len(settled))
