"""A pool's drains, decided (pure: no Temporal call): the grace a scale-in's drains get, which requested
moves off a drained node start, when a moved copy's replacement serves, and what a finished drain says."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from workflows.payloads import CopyStatus
from workflows.pool_size import revision_of, wants
from workflows.pool_state import PoolState


def drain_grace(pool_grace_s: float, requested_grace_s: float | None) -> float:
    """A scale-in's drains get the grace its request named (`berth workflow drain`), else the pool's DrainGrace."""
    return pool_grace_s if requested_grace_s is None else requested_grace_s


def moves_to_start(moves: Sequence[tuple[str, float]], running: Collection[str],
                   draining: Collection[str]) -> list[tuple[str, float]]:
    """The requested moves (copy, grace) that drain now: copies still running and not draining already."""
    return [(copy_id, grace_s) for copy_id, grace_s in moves if copy_id in running and copy_id not in draining]


def replacement_serves(state: PoolState, copy_id: str) -> bool:
    """A moved copy may drain: its revision has as many ready copies besides it as it wants, or the pool stops."""
    revision = revision_of(state, copy_id)
    ready = sum(1 for c, info in state.copies.items() if c != copy_id and c not in state.draining
                and info.status is CopyStatus.READY and revision_of(state, c) == revision)
    return state.stop_requested or ready >= max(1, wants(state).get(revision, 0))


def drain_note(drained: bool, waited_s: float, grace_s: float) -> str:
    """How a drain's in-flight requests ended."""
    return (f"in-flight requests finished in {waited_s:.1f} s" if drained
            else f"grace of {grace_s:.0f} s ran out with requests still in flight")
