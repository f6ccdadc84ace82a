"""Labelled Prometheus counters and histograms counted without locks: the proxies' per-request figures.

prometheus-client's own take a lock per increment and walk a histogram's buckets in Python (~0.9 µs an
observation; a proxied request makes three and two increments: ~4 µs of each, docs/performance.md). A proxy
counts on its event loop's one thread and is scraped on it too (`/metrics` is answered in the loop), so these
take no lock and find a bucket by bisection. They are exposed by a collector on the proxy's registry, under the
same names, labels and text format as prometheus-client's (less the `_created` samples)."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class CounterSeries:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramSeries:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last one is +Inf's
        self.total = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bound ≥ amount: Prometheus's `le`
        self.total += amount


class _Labelled:
    """A metric's series by label values, registered on `registry` as a collector."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        registry.register(self)  # type: ignore[arg-type]  # a collector is anything with `collect`


class LightCounter(_Labelled):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self._series: dict[tuple[str, ...], CounterSeries] = {}
        super().__init__(name, documentation, labelnames, registry)

    def labels(self, *values: str) -> CounterSeries:
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = CounterSeries()
        return series

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in list(self._series.items()):
            family.add_metric(list(values), series.value)
        yield family


class LightHistogram(_Labelled):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.bounds = tuple(float(bound) for bound in buckets)
        self._series: dict[tuple[str, ...], HistogramSeries] = {}
        super().__init__(name, documentation, labelnames, registry)

    def labels(self, *values: str) -> HistogramSeries:
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = HistogramSeries(self.bounds)
        return series

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        names = [floatToGoString(bound) for bound in (*self.bounds, math.inf)]
        for values, series in list(self._series.items()):
            running, buckets = 0, []
            for name, count in zip(names, series.counts, strict=True):
                running += count
                buckets.append((name, running))
            family.add_metric(list(values), buckets, series.total)
        yield family
