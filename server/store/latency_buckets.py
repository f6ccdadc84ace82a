"""Latency histograms small enough to ride on an audit tally row: bucket i holds latencies in
[2^(i/4), 2^((i+1)/4)) ms (bucket 0 also holds everything under 1 ms, the last everything past ~17 minutes), so a
quantile read back from merged buckets is within ~9% of the true one, whatever the scale.

Why buckets and not the latencies: a tally is one row per batch, minute, endpoint, copy, key and user, written on
the audit's hot path (server/store/audit.py); a sparse text of a few `bucket:count` pairs costs that path a
logarithm a record and the row a few bytes, and any number of rows merge by adding counts."""

from __future__ import annotations

import math
from collections.abc import Iterable

PER_DOUBLING = 4
LAST = 80  # 2^20 ms ≈ 17.5 minutes: a request longer than that is counted there
Buckets = dict[int, int]


def bucket_of(latency_ms: float) -> int:
    if latency_ms < 1.0:
        return 0
    return min(LAST, int(PER_DOUBLING * math.log2(latency_ms)))


def encoded(buckets: Buckets | None) -> str | None:
    """`bucket:count` pairs, comma-separated, by bucket; None for no latency at all."""
    if not buckets:
        return None
    return ",".join(f"{bucket}:{count}" for bucket, count in sorted(buckets.items()))


def merge(into: Buckets, text: str | None) -> None:
    """Add the counts of one encoded histogram (as `encoded` wrote it) into `into`."""
    if not text:
        return
    for pair in text.split(","):
        bucket, _, count = pair.partition(":")
        into[int(bucket)] = into.get(int(bucket), 0) + int(count)


def quantile(buckets: Buckets, q: float) -> float | None:
    """The q-quantile (0 < q ≤ 1) by nearest rank, as its bucket's geometric middle in ms; None when empty."""
    total = sum(buckets.values())
    if total == 0:
        return None
    rank, seen = max(1, math.ceil(q * total)), 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank:
            return middle(bucket)
    return middle(max(buckets))  # not reached: the counts sum to `total`


def middle(bucket: int) -> float:
    return round(2 ** ((bucket + 0.5) / PER_DOUBLING), 3)


def quantiles(texts: Iterable[str | None], qs: tuple[float, ...]) -> tuple[float | None, ...]:
    merged: Buckets = {}
    for text in texts:
        merge(merged, text)
    return tuple(quantile(merged, q) for q in qs)
