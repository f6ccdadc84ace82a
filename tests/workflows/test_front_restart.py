"""The front process's restart decider on its own: the first restart at once, then a doubling back-off up to its
cap, reset after a healthy run, no restart while its host stops or after a fatal configuration error; histories
from before `front-restart-at-once` wait 1 s before the first restart, and go on doing so."""

from __future__ import annotations

from workflows.front_restart import (
    FIRST_BACKOFF_S,
    RESTART_AT_ONCE_S,
    SERVICE_BACKOFF_MAX_S,
    SERVICE_BACKOFF_RESET_S,
    FrontRestart,
    FrontVerdict,
    after_exit,
)


def crash_loop(first_s: float, crashes: int = 9) -> list[float]:
    waits, backoff = [], first_s
    for _ in range(crashes):
        decided = after_exit(backoff, 1.0, stopping=False, fatal=False, first_s=first_s)
        assert decided.verdict is FrontVerdict.RESTART
        waits.append(decided.wait_s)
        backoff = decided.next_backoff_s
    assert backoff == SERVICE_BACKOFF_MAX_S
    return waits


def test_the_first_restart_is_at_once_then_crashes_in_a_row_wait_doubling_up_to_the_cap() -> None:
    assert crash_loop(RESTART_AT_ONCE_S) == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_before_the_patch_the_first_restart_waited_a_second() -> None:
    assert crash_loop(FIRST_BACKOFF_S) == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_a_healthy_run_resets_the_back_off() -> None:
    assert after_exit(32.0, SERVICE_BACKOFF_RESET_S, stopping=False, fatal=False) == FrontRestart(
        FrontVerdict.RESTART, wait_s=0.0, next_backoff_s=1.0)
    assert after_exit(32.0, SERVICE_BACKOFF_RESET_S, stopping=False, fatal=False, first_s=FIRST_BACKOFF_S) == \
        FrontRestart(FrontVerdict.RESTART, wait_s=1.0, next_backoff_s=2.0)


def test_a_stopping_host_or_a_fatal_error_ends_it() -> None:
    assert after_exit(4.0, 1.0, stopping=True, fatal=True).verdict is FrontVerdict.STOP
    assert after_exit(4.0, 1.0, stopping=False, fatal=True).verdict is FrontVerdict.FAIL
