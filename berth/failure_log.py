"""FailureLog: a failure that repeats every second (a peer down) logged once at once, then at most once
per interval with a count of the suppressed ones, and once when it recovers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class FailureLog:
    """Rate-limited warnings for one repeated failure. A component polling a peer that is down would
    otherwise write one line per poll (one a second for the endpoint proxy's route refresh)."""

    def __init__(self, log: logging.Logger, what: str, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.what, self.every_s, self.clock = log, what, every_s, clock
        self.failures = 0  # in the current streak
        self._suppressed = 0
        self._last_logged = 0.0

    def failed(self, error: object) -> None:
        self.failures += 1
        now = self.clock()
        if self.failures == 1:
            self.log.warning("%s failed: %s", self.what, error)
        elif now - self._last_logged >= self.every_s:
            self.log.warning("%s failed: %s (%d more failure(s) not logged since the last line)",
                             self.what, error, self._suppressed)
        else:
            self._suppressed += 1
            return
        self._last_logged, self._suppressed = now, 0

    def succeeded(self) -> None:
        if self.failures:
            self.log.warning("%s recovered after %d failure(s)", self.what, self.failures)
        self.failures, self._suppressed = 0, 0
