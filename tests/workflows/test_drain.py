"""The pool's drain decider on its own: the scale-in's grace, which moves start, when a moved copy's
replacement serves, and what a drain's end says."""

from __future__ import annotations

from workflows.drain import drain_grace, drain_note, moves_to_start, replacement_serves
from workflows.payloads import CopyInfo, CopyStatus
from workflows.pool_state import PoolState


def test_a_requested_grace_wins_over_the_pools() -> None:
    assert drain_grace(30.0, None) == 30.0
    assert drain_grace(30.0, 0.0) == 0.0


def test_only_running_copies_not_draining_yet_move() -> None:
    moves = [("p.copy-0", 5.0), ("p.copy-1", 5.0), ("p.copy-gone", 5.0)]
    assert moves_to_start(moves, {"p.copy-0", "p.copy-1"}, ["p.copy-1"]) == [("p.copy-0", 5.0)]


def test_a_moved_copy_drains_once_its_revision_has_enough_other_ready_copies() -> None:
    state = PoolState(desired=2)
    state.copies = {c: CopyInfo(copy_id=c, status=CopyStatus.READY) for c in ("p.copy-0", "p.copy-1")}
    state.copies["p.copy-2"] = CopyInfo(copy_id="p.copy-2", status=CopyStatus.STARTING)
    assert not replacement_serves(state, "p.copy-0")  # one other ready copy; the pool wants two
    state.copies["p.copy-2"] = CopyInfo(copy_id="p.copy-2", status=CopyStatus.READY)
    assert replacement_serves(state, "p.copy-0")
    state.draining.append("p.copy-2")  # a draining copy is no replacement
    assert not replacement_serves(state, "p.copy-0")
    state.stop_requested = True
    assert replacement_serves(state, "p.copy-0")


def test_a_one_copy_pool_waits_for_one_replacement() -> None:
    state = PoolState(desired=1)
    state.copies = {"p.copy-0": CopyInfo(copy_id="p.copy-0", status=CopyStatus.READY)}
    assert not replacement_serves(state, "p.copy-0")
    state.copies["p.copy-1"] = CopyInfo(copy_id="p.copy-1", status=CopyStatus.READY)
    assert replacement_serves(state, "p.copy-0")


def test_a_drains_note_says_how_it_ended() -> None:
    assert drain_note(True, 1.25, 30.0) == "in-flight requests finished in 1.2 s"
    assert drain_note(False, 30.0, 30.0) == "grace of 30 s ran out with requests still in flight"
