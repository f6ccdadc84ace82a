"""The latency histograms on audit tallies: a quantile read back from merged buckets is within ~9% of the true one
at any scale, merging adds counts, and the encoding round-trips."""

from __future__ import annotations

import random

import pytest

from server.store.latency_buckets import LAST, bucket_of, encoded, merge, quantile, quantiles

pytestmark = pytest.mark.timeout(30)


def _true_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, -(-int(q * len(ordered) * 1000) // 1000)) - 1]


@pytest.mark.parametrize("scale_ms", [3.0, 80.0, 2500.0, 60_000.0])
def test_quantiles_from_buckets_are_within_nine_percent(scale_ms: float) -> None:
    draw = random.Random(7)
    values = [scale_ms * draw.lognormvariate(0, 0.6) for _ in range(2000)]
    buckets: dict[int, int] = {}
    for value in values:
        buckets[bucket_of(value)] = buckets.get(bucket_of(value), 0) + 1
    for q in (0.5, 0.9, 0.99):
        estimate = quantile(buckets, q)
        assert estimate == pytest.approx(_true_quantile(values, q), rel=0.095)


def test_merged_texts_add_their_counts_and_round_trip() -> None:
    first, second = {bucket_of(10.0): 3}, {bucket_of(10.0): 1, bucket_of(1000.0): 1}
    merged: dict[int, int] = {}
    for text in (encoded(first), encoded(second), None, ""):
        merge(merged, text)
    assert merged == {bucket_of(10.0): 4, bucket_of(1000.0): 1}
    assert quantiles([encoded(first), encoded(second)], (0.5, 0.99)) == (quantile(merged, 0.5), quantile(merged, 0.99))
    assert quantiles([None], (0.5,)) == (None,)
    assert encoded({}) is None


def test_the_ends_hold_what_is_below_a_millisecond_and_past_seventeen_minutes() -> None:
    assert bucket_of(0.0) == bucket_of(0.5) == 0
    assert bucket_of(3_600_000.0) == LAST
