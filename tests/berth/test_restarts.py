"""The embedded stack's restart back-off: 0.5 s doubling to 30 s, from 0.5 s again after 60 s up."""

from __future__ import annotations

from berth.restarts import Backoff, RestartRecord


def test_backoff_doubles_to_the_cap_and_resets_after_a_long_run() -> None:
    backoff, record = Backoff(), RestartRecord(started_at=0.0)
    delays, now = [], 0.0
    for _ in range(9):  # a component that crashes as soon as it starts
        delays.append(record.exited(-9, now, 1000.0 + now, backoff))
        now = record.due_at or now
        record.restarted(now)
    assert delays == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert record.restarts == 9 and record.last_exit_status == -9
    # Up for 60 s: its next crash is a new incident.
    assert record.exited(1, now + 60, 2000.0, backoff) == 0.5
    assert record.summary() == {"restarts": 9, "last_exit_status": 1, "last_exit_at": 2000.0}


def test_a_failed_restart_is_tried_again_later() -> None:
    backoff, record = Backoff(), RestartRecord(started_at=0.0)
    record.exited(-9, 100.0, 0.0, backoff)
    assert record.postpone(100.5, backoff) == 1 and record.due_at == 101.5
    assert record.restarts == 0
