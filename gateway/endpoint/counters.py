"""Limit counters: the `Counters` protocol the limiter admits and finishes requests through, and
`MemoryCounters`, one proxy's counters in its own memory (gateway/endpoint/redis_counters.py shares them between
proxies).

Windows are fixed: a windowed counter counts within one epoch window (the minute for RPM and TPM, the UTC
day for the daily budget), named by the window's index; a new window starts at zero. Fixed windows cost
O(1) per scope and one number each, where a sliding window would keep a log per scope; a burst of 2× the
limit across a window boundary is the price, accepted here as in most gateways."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# What a check counts (one letter: the Redis script reads them too).
REQUESTS = "r"  # requests in the window: refused when one more would pass the limit; admitting counts one
# tokens in the window: admitting reserves the request's estimate (prompt + max_tokens), refused when the
# reservation would pass the limit (or the limit is reached); finish settles it to the answer's usage
TOKENS = "t"
IN_FLIGHT = "c"  # requests admitted and not finished: refused when one more would pass the limit

MINUTE = 60
DAY = 86400
# Windowed counters one proxy keeps (about 200 bytes each): far more scope members than a cluster has in a
# minute, and a bound on what distinct ids can cost.
MAX_WINDOWED = 100_000


@dataclass(frozen=True, slots=True)
class Check:
    """One counter a request is admitted against. `window` in seconds (0: not windowed, IN_FLIGHT)."""

    key: str
    kind: str
    limit: int
    window: int = MINUTE


def window_index(now: float, window: int) -> int:
    return int(now // window)


def settle(check: Check, tokens: int, reserved: int, admitted_at: float | None, now: float) -> int:
    """What `finish` adds to a TOKENS counter in the window holding `now`: the answer's tokens, less what the
    admission reserved when that reservation sits in the same window (a request that crossed into a new
    window is charged there in full; its reservation stays in the window that ended)."""
    if reserved and admitted_at is not None and \
            window_index(admitted_at, check.window) == window_index(now, check.window):
        return tokens - reserved
    return tokens


def window_left(now: float, window: int) -> int:
    """Whole seconds until the window holding `now` ends (at least 1): a refusal's Retry-After."""
    return max(1, int(window - now % window + 0.999))


class Counters(Protocol):
    async def admit(self, checks: Sequence[Check], ticket: str, now: float, reserve: int = 0) -> int:
        """All or nothing: when every check passes, count the REQUESTS and IN_FLIGHT ones, reserve `reserve`
        tokens in the TOKENS ones, and answer -1; otherwise count nothing and answer the index of the first
        check that refused."""
        ...

    async def finish(self, charges: Sequence[Check], releases: Sequence[Check], ticket: str, tokens: int,
                     now: float, reserved: int = 0, admitted_at: float | None = None) -> None:
        """Settle the TOKENS counters `charges` to `tokens` (`settle`: less the reservation made at
        `admitted_at`) and release the IN_FLIGHT slots `releases` that `ticket` held. Never raises for a
        store it cannot reach."""
        ...


class MemoryCounters:
    """One process's counters: a dict per kind, read and written with no await between the check and the
    count, so an admit is all or nothing on the event loop. Windows past are dropped when a new minute
    starts, and an in-flight counter at zero is removed: memory holds only the live scopes."""

    def __init__(self) -> None:
        # key -> [window (s), window index, count]; keys are str, whose hash Python caches: the hot path
        # hashes nothing anew (a (key, window) tuple would be hashed on every lookup).
        self._windowed: dict[str, list[int]] = {}
        self._in_flight: dict[str, int] = {}
        self._swept_minute = 0

    def used(self, check: Check, now: float) -> int:
        if check.kind == IN_FLIGHT:
            return self._in_flight.get(check.key, 0)
        slot = self._windowed.get(check.key)
        if slot is None or slot[1] != int(now // check.window):
            return 0
        return slot[2]

    def _add(self, check: Check, amount: int, now: float) -> None:
        index = int(now // check.window)
        slot = self._windowed.get(check.key)
        if slot is None or slot[1] != index:
            if slot is None and len(self._windowed) >= MAX_WINDOWED:
                self._evict()
            self._windowed[check.key] = [check.window, index, amount]
        else:
            slot[2] += amount

    def _evict(self) -> None:
        """Forget the oldest tenth of the counters. A stranger sending a new `x-session-id` or
        `x-project-id` on every request would otherwise grow them without bound within a minute (issue 29);
        a forgotten member starts again at zero, which a caller choosing new ids gets anyway."""
        for key in list(itertools.islice(self._windowed, MAX_WINDOWED // 10)):
            del self._windowed[key]

    def _sweep(self, now: float) -> None:
        """Drop every window that has ended: once a minute, so O(1) amortized per admit."""
        minute = int(now // MINUTE)
        if minute == self._swept_minute:
            return
        self._swept_minute = minute
        self._windowed = {key: slot for key, slot in self._windowed.items() if slot[1] == int(now // slot[0])}

    async def admit(self, checks: Sequence[Check], ticket: str, now: float, reserve: int = 0) -> int:
        return self.admit_now(checks, now, reserve)

    def admit_now(self, checks: Sequence[Check], now: float, reserve: int = 0) -> int:
        self._sweep(now)
        windowed, in_flight = self._windowed, self._in_flight
        for index, check in enumerate(checks):
            # REQUESTS and IN_FLIGHT: refused when one more would pass the limit; TOKENS: once reached, or
            # when the reservation would pass it.
            if check.kind == IN_FLIGHT:
                if in_flight.get(check.key, 0) >= check.limit:
                    return index
                continue
            slot = windowed.get(check.key)
            used = slot[2] if slot is not None and slot[1] == int(now // check.window) else 0
            if used >= check.limit or (check.kind == TOKENS and used + reserve > check.limit):
                return index
        for check in checks:
            if check.kind == REQUESTS:
                self._add(check, 1, now)
            elif check.kind == IN_FLIGHT:
                in_flight[check.key] = in_flight.get(check.key, 0) + 1
            elif reserve:
                self._add(check, reserve, now)
        return -1

    async def finish(self, charges: Sequence[Check], releases: Sequence[Check], ticket: str, tokens: int,
                     now: float, reserved: int = 0, admitted_at: float | None = None) -> None:
        for check in charges:
            amount = settle(check, tokens, reserved, admitted_at, now)
            if amount > 0 or (amount < 0 and check.key in self._windowed):  # a forgotten counter stays forgotten
                self._add(check, amount, now)
        in_flight = self._in_flight
        for check in releases:
            left = in_flight.get(check.key, 0) - 1
            if left > 0:
                in_flight[check.key] = left
            else:
                in_flight.pop(check.key, None)

    def size(self) -> int:
        """How many counters are held (bounded-memory tests)."""
        return len(self._windowed) + len(self._in_flight)
