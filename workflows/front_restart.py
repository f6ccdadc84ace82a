"""When an endpoint's front process ended, decided (pure: no Temporal call): stop with its host, fail on a
fatal configuration error, or start it again — at once after a healthy run, then after a back-off that doubles
while the crashes go on (as the kubelet and systemd restart a crashed process: the first restart waits for
nothing, a crash loop for longer and longer)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

RESTART_AT_ONCE_S = 0.0  # the first restart after a healthy run (`front-restart-at-once`)
FIRST_BACKOFF_S = 1.0  # the least back-off once one is due; the first restart's before `front-restart-at-once`
# A front process is restarted by its supervisor (with back-off), never by Temporal behind its back.
SERVICE_BACKOFF_MAX_S = 60.0
# A run that lasted this long was healthy: the next crash is restarted after the first back-off again,
# as `berth up` does for its components (a month of rare crashes must not cost a minute each).
SERVICE_BACKOFF_RESET_S = 60.0


class FrontVerdict(str, Enum):
    STOP = "stop"  # its host stops: nothing to restart
    FAIL = "fail"  # a fatal configuration error: restarting cannot help
    RESTART = "restart"  # start it again after `wait_s`


@dataclass(frozen=True)
class FrontRestart:
    verdict: FrontVerdict
    wait_s: float = 0.0  # the back-off before this restart
    next_backoff_s: float = FIRST_BACKOFF_S  # the back-off before the restart after it


def after_exit(backoff_s: float, ran_s: float, stopping: bool, fatal: bool,
               first_s: float = RESTART_AT_ONCE_S) -> FrontRestart:
    """`backoff_s`: the back-off due before this restart; `ran_s`: how long the run that ended lasted; `first_s`:
    the back-off a healthy run resets it to (FIRST_BACKOFF_S for histories from before `front-restart-at-once`)."""
    if ran_s >= SERVICE_BACKOFF_RESET_S:
        backoff_s = first_s
    if stopping:
        return FrontRestart(FrontVerdict.STOP, next_backoff_s=backoff_s)
    if fatal:
        return FrontRestart(FrontVerdict.FAIL, next_backoff_s=backoff_s)
    return FrontRestart(FrontVerdict.RESTART, wait_s=backoff_s,
                        next_backoff_s=min(max(backoff_s * 2, FIRST_BACKOFF_S), SERVICE_BACKOFF_MAX_S))
