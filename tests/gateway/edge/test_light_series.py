"""The lock-free series expose what prometheus-client's own would, sample for sample (less `_created`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.edge.light_series import LightCounter, LightHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)


def _samples(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {(sample.name, tuple(sorted(sample.labels.items())), sample.value)
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for sample in family.samples if not sample.name.endswith("_created")}


def test_light_series_match_prometheus_clients_own() -> None:
    stock, light = CollectorRegistry(), CollectorRegistry()
    histograms = (Histogram("h_seconds", "h", ("e",), buckets=BUCKETS, registry=stock),
                  LightHistogram("h_seconds", "h", ("e",), BUCKETS, light))
    counters = (Counter("c", "c", ("e", "code"), registry=stock), LightCounter("c", "c", ("e", "code"), light))
    for value in (0.0005, 0.001, 0.005, 0.5, 1.0, 7.0, 0.01):  # on a bound counts in it: Prometheus's `le`
        for histogram in histograms:
            histogram.labels("a").observe(value)
    for counter in counters:
        counter.labels("a", "200").inc()
        counter.labels("a", "200").inc(2)
        counter.labels("b", "404").inc()
    assert _samples(light) == _samples(stock)
