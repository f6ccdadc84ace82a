"""Usage's calendar arithmetic, pure: the UTC hours, days and months a query window spans (each clipped to the
window), the period an instant falls in, and how long two intervals overlap. The store's queries
(server/store/usage.py) sum in SQL over the periods this module lists."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from berth.contracts.usage import UsagePeriod
from berth.errors import UserInputError

MAX_PERIODS = 2_000  # a query's periods at most: 83 days by the hour, 5 years by the day


class Span(NamedTuple):
    """[start, end) in Unix seconds."""

    start: float
    end: float

    @property
    def minutes(self) -> tuple[int, int]:
        """The audit tallies' minutes that start within the span: [first, last) (a tally is a minute's records)."""
        return math.ceil(self.start / 60), math.ceil(self.end / 60)


def period_start(at: float, period: UsagePeriod) -> float:
    """The start of the UTC hour, day or month `at` falls in."""
    moment = datetime.fromtimestamp(at, UTC)
    if period is UsagePeriod.HOUR:
        moment = moment.replace(minute=0, second=0, microsecond=0)
    elif period is UsagePeriod.DAY:
        moment = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    else:
        moment = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return moment.timestamp()


def next_start(start: float, period: UsagePeriod) -> float:
    """The start of the period after the one starting at `start`."""
    moment = datetime.fromtimestamp(start, UTC)
    if period is UsagePeriod.HOUR:
        return (moment + timedelta(hours=1)).timestamp()
    if period is UsagePeriod.DAY:
        return (moment + timedelta(days=1)).timestamp()
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return moment.replace(year=year, month=month).timestamp()


def current(at: float, period: UsagePeriod) -> Span:
    """The whole period `at` falls in (a budget's)."""
    start = period_start(at, period)
    return Span(start, next_start(start, period))


def periods(window: Span, period: UsagePeriod | None) -> list[Span]:
    """The periods the window spans, each clipped to it; the window itself when there is no period. A window too
    long for its period is refused in one line rather than answered slowly."""
    if window.end <= window.start:
        raise UserInputError("--until must be later than --since.")
    if period is None:
        return [window]
    spans, start = [], window.start
    while start < window.end:
        end = min(next_start(period_start(start, period), period), window.end)
        spans.append(Span(start, end))
        if len(spans) > MAX_PERIODS:
            raise UserInputError(f"That window spans more than {MAX_PERIODS} {period.value}s: choose a longer "
                                 "--period or a shorter window.")
        start = end
    return spans


def overlap(start: float, end: float, window: Span) -> float:
    """Seconds of [start, end) inside the window (0 when they do not meet)."""
    return max(0.0, min(end, window.end) - max(start, window.start))
