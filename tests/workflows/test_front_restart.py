"""The front process's restart decider on its own: doubling back-off up to its cap, reset after a healthy
run, no restart while its host stops or after a fatal configuration error."""

from __future__ import annotations

from workflows.front_restart import (
    FIRST_BACKOFF_S,
    SERVICE_BACKOFF_MAX_S,
    SERVICE_BACKOFF_RESET_S,
    FrontRestart,
    FrontVerdict,
    after_exit,
)


def test_crashes_in_a_row_wait_doubling_up_to_the_cap() -> None:
    waits, backoff = [], FIRST_BACKOFF_S
    for _ in range(8):
        decided = after_exit(backoff, 1.0, stopping=False, fatal=False)
        assert decided.verdict is FrontVerdict.RESTART
        waits.append(decided.wait_s)
        backoff = decided.next_backoff_s
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert backoff == SERVICE_BACKOFF_MAX_S


def test_a_healthy_run_resets_the_back_off() -> None:
    assert after_exit(32.0, SERVICE_BACKOFF_RESET_S, stopping=False, fatal=False) == FrontRestart(
        FrontVerdict.RESTART, wait_s=1.0, next_backoff_s=2.0)


def test_a_stopping_host_or_a_fatal_error_ends_it() -> None:
    assert after_exit(4.0, 1.0, stopping=True, fatal=True).verdict is FrontVerdict.STOP
    assert after_exit(4.0, 1.0, stopping=False, fatal=True).verdict is FrontVerdict.FAIL
