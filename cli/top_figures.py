"""The figures `berth top` shows, from two scrapes of the endpoint proxy's /metrics: per endpoint, requests
per second, p50 and p99 latency and the 5xx share over the interval. Pure functions, no I/O: counter
increases as Prometheus's `increase()` takes them (a reset counts from zero) and quantiles as its
`histogram_quantile()` interpolates them within a bucket."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

REQUESTS = "berth_proxy_requests_total"
DURATION_BUCKET = "berth_proxy_request_duration_seconds_bucket"

# A sample's key: its name and its labels, sorted (a series of the scrape).
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Scrape:
    """One scrape: when (seconds, any monotonic clock) and every sample by series."""

    at: float
    samples: Mapping[SeriesKey, float]


@dataclass(frozen=True)
class EndpointFigures:
    """One row of `berth top`. None: no request in the interval (nothing to take a quantile or a share of)."""

    endpoint: str
    requests_per_s: float
    p50_s: float | None
    p99_s: float | None
    error_rate: float | None  # answers with a 5xx status, as a share of all answers
    copies: int | None  # ready copies, from the API; None: the API lists no such endpoint


def parse_scrape(text: str, at: float) -> Scrape:
    """The Prometheus text a /metrics answered, as a Scrape."""
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): float(sample.value)
               for family in text_string_to_metric_families(text) for sample in family.samples}
    return Scrape(at=at, samples=samples)


def increase(before: float | None, after: float) -> float:
    """A counter's increase between two samples. A fall is a reset (the process restarted): Prometheus then
    counts the whole later value; a series absent before started at zero."""
    if before is None or after < before:
        return after
    return after - before


def histogram_quantile(quantile: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The `quantile` (0-1) of a histogram given as (upper bound `le`, cumulative count) pairs, as Prometheus
    computes it: linear interpolation inside the bucket the rank falls in, the first bucket starting at 0,
    the +Inf bucket answered with the highest finite bound. None where Prometheus answers NaN (no
    observations, no +Inf bucket, fewer than two buckets)."""
    if quantile < 0:
        return -math.inf
    if quantile > 1:
        return math.inf
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    # Counts must not fall with the bound (they may, from scrape skew): Prometheus evens them out the same way.
    counts, highest = [], 0.0
    for _, count in ordered:
        highest = max(highest, count)
        counts.append(highest)
    total = counts[-1]
    if total <= 0:
        return None
    rank = quantile * total
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0]
    upper = ordered[index][0]
    if index == 0 and upper <= 0:
        return upper
    lower, below = (0.0, 0.0) if index == 0 else (ordered[index - 1][0], counts[index - 1])
    in_bucket = counts[index] - below
    return upper if in_bucket <= 0 else lower + (upper - lower) * (rank - below) / in_bucket


def _labels(key: SeriesKey) -> dict[str, str]:
    return dict(key[1])


def endpoint_figures(before: Scrape, after: Scrape, copies: Mapping[str, int]) -> list[EndpointFigures]:
    """Every endpoint the API lists or the proxy counted, by id: its figures over the two scrapes' interval."""
    seconds = after.at - before.at
    if seconds <= 0:
        raise ValueError("the second scrape must come after the first")
    answers: dict[str, float] = defaultdict(float)
    failures: dict[str, float] = defaultdict(float)
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for key, value in after.samples.items():
        name, labels = key[0], _labels(key)
        grown = increase(before.samples.get(key), value)
        if name == REQUESTS:
            answers[labels["endpoint"]] += grown
            if labels.get("code", "").startswith("5"):
                failures[labels["endpoint"]] += grown
        elif name == DURATION_BUCKET:
            buckets[labels["endpoint"]][float(labels["le"])] += grown
    rows = []
    for endpoint in sorted(set(copies) | set(answers)):
        answered = answers.get(endpoint, 0.0)
        spread = list(buckets.get(endpoint, {}).items())
        rows.append(EndpointFigures(
            endpoint=endpoint, requests_per_s=answered / seconds,
            p50_s=histogram_quantile(0.5, spread) if answered else None,
            p99_s=histogram_quantile(0.99, spread) if answered else None,
            error_rate=failures.get(endpoint, 0.0) / answered if answered else None,
            copies=copies.get(endpoint)))
    return rows
