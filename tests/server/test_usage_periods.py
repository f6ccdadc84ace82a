"""Usage's calendar arithmetic (server/usage_periods.py): UTC hours, days and months, a window's periods clipped to
it, the longest listing refused in one line, and the overlap of two intervals."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from berth.contracts.usage import UsagePeriod
from berth.errors import UserInputError
from server.usage_periods import MAX_PERIODS, Span, current, overlap, period_start, periods


def _at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_periods_start_on_utc_boundaries_and_months_roll_over_the_year() -> None:
    moment = _at("2026-12-31T23:59:30")
    assert period_start(moment, UsagePeriod.HOUR) == _at("2026-12-31T23:00:00")
    assert period_start(moment, UsagePeriod.DAY) == _at("2026-12-31T00:00:00")
    assert current(moment, UsagePeriod.MONTH) == Span(_at("2026-12-01T00:00:00"), _at("2027-01-01T00:00:00"))
    assert current(_at("2028-02-10T00:00:00"), UsagePeriod.MONTH).end == _at("2028-03-01T00:00:00")  # leap year


def test_a_windows_periods_are_clipped_to_it() -> None:
    window = Span(_at("2026-01-31T22:30:00"), _at("2026-03-01T01:00:00"))
    assert periods(window, UsagePeriod.MONTH) == [Span(window.start, _at("2026-02-01T00:00:00")),
                                                  Span(_at("2026-02-01T00:00:00"), _at("2026-03-01T00:00:00")),
                                                  Span(_at("2026-03-01T00:00:00"), window.end)]
    assert periods(window, None) == [window]
    assert len(periods(window, UsagePeriod.DAY)) == 30  # a part of Jan 31, 28 days of February, a part of Mar 1
    assert Span(60.5, 180.0).minutes == (2, 3)  # the minutes starting inside it: 120 only


def test_an_empty_window_or_too_many_periods_is_refused_in_one_line() -> None:
    with pytest.raises(UserInputError, match="--until must be later than --since"):
        periods(Span(10.0, 10.0), None)
    with pytest.raises(UserInputError, match=f"more than {MAX_PERIODS} hours"):
        periods(Span(0.0, (MAX_PERIODS + 1) * 3600.0), UsagePeriod.HOUR)
    assert len(periods(Span(0.0, MAX_PERIODS * 3600.0), UsagePeriod.HOUR)) == MAX_PERIODS


def test_overlap_is_the_shared_seconds_or_zero() -> None:
    assert overlap(10, 50, Span(20, 100)) == 30
    assert overlap(0, 10, Span(20, 100)) == 0
    assert overlap(0, 200, Span(20, 100)) == 80
