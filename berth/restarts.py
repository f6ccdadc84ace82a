"""Restart back-off for the embedded stack's components: when a crashed one is started again, and the
record `berth status` shows (restart count, last exit status and time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backoff:
    """0.5 s doubling to 30 s: a component that crashes at once is retried quickly, one that crashes in a
    loop costs one start every 30 s. A component that stayed up `reset_after_s` starts from `first_s`
    again: its next crash is a new incident, not the same one."""

    first_s: float = 0.5
    max_s: float = 30.0
    reset_after_s: float = 60.0


@dataclass
class RestartRecord:
    """One component's restarts. Monotonic times schedule; the wall-clock time is for people."""

    started_at: float  # monotonic: when the running process started
    restarts: int = 0
    last_exit_status: int | None = None
    last_exit_at: float | None = None  # wall clock (epoch seconds)
    due_at: float | None = None  # monotonic: a restart is pending until then
    next_delay_s: float | None = None

    def exited(self, status: int, now: float, wall: float, backoff: Backoff) -> float:
        """Record an exit and schedule the restart; returns the delay before it."""
        if self.next_delay_s is None or now - self.started_at >= backoff.reset_after_s:
            self.next_delay_s = backoff.first_s
        delay = self.next_delay_s
        self.next_delay_s = min(delay * 2, backoff.max_s)
        self.last_exit_status, self.last_exit_at, self.due_at = status, wall, now + delay
        return delay

    def postpone(self, now: float, backoff: Backoff) -> float:
        """The restart itself failed (the executable could not be started): try again, later."""
        delay = self.next_delay_s or backoff.first_s
        self.next_delay_s, self.due_at = min(delay * 2, backoff.max_s), now + delay
        return delay

    def restarted(self, now: float) -> None:
        self.restarts += 1
        self.started_at, self.due_at = now, None

    def summary(self) -> dict[str, Any]:
        return {"restarts": self.restarts, "last_exit_status": self.last_exit_status,
                "last_exit_at": self.last_exit_at}
