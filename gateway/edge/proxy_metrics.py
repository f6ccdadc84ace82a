"""ProxyMetrics: the endpoint proxy's Prometheus figures (prometheus-client, one registry per proxy).

Labels are bounded on purpose: an endpoint id only for an endpoint the routing table knows (a path with a
made-up id counts as `unknown`, so a caller cannot mint series), a status code, and a refusal reason from a
fixed set; never a user, key, prompt or copy URL. Names and labels are listed in docs/operations.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.edge.asgi import plain
from gateway.edge.light_series import LightCounter, LightHistogram
from gateway.edge.upstream import Send

UNKNOWN = "unknown"
SERIES_KEPT = 10_000  # labelled series looked up ahead; the endpoint label is bounded by known endpoints anyway
# Seconds: from a cached answer's 1 ms to a long generation's minutes.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0, 300.0, 600.0)
# The proxy's own share of a request: tens of microseconds when healthy (docs/performance.md).
ADDED_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# A refusal the proxy answered itself, by its status: the reason Prometheus users group by.
REFUSALS = {401: "auth", 403: "scope", 404: "unknown_endpoint", 413: "size", 429: "limit", 400: "bad_request"}
LOOPBACK = ("127.0.0.1", "::1")


class RequestClock:
    """One request's moments on the proxy's monotonic clock, noted by the watched `send`."""

    __slots__ = ("answered", "chunks", "first_byte", "proxied", "started", "status", "subject", "upstream_headers_s")

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.answered: float | None = None  # the answer's headers left the proxy
        self.status = 0  # the answer's status; 0 while none was sent
        self.subject = UNKNOWN  # the model gateway's label for this request, once it has read the body
        self.proxied = False  # a copy answered (the model gateway's note; the endpoint proxy's is the audit's)
        self.first_byte: float | None = None
        self.chunks = 0
        self.upstream_headers_s: float | None = None  # the copy's time to its headers, set by the forwarder

    def on_start(self, message: dict[str, Any]) -> dict[str, Any]:
        """The answer's head is leaving: note when, and its status."""
        self.answered = time.monotonic()
        self.status = message["status"]
        return message

    def on_body(self, body: bytes) -> None:
        """A non-empty body chunk is leaving: count it; the first one is the first byte."""
        self.chunks += 1
        if self.first_byte is None:
            self.first_byte = time.monotonic()


class ProxyMetrics:
    """`enabled=False` (BERTH_METRICS=off) records nothing and serves no /metrics: the baseline the
    benchmark compares the proxy's added latency against.

    The model gateway keeps the same figures under its own names: `prefix="berth_model_gateway"` and
    `subject="model"` (a model it discovered; any other name counts as `unknown`)."""

    def __init__(self, registry: CollectorRegistry | None = None, enabled: bool = True,
                 prefix: str = "berth_proxy", subject: str = "endpoint") -> None:
        self.enabled = enabled
        self.registry = registry or CollectorRegistry(auto_describe=True)
        one, r = (subject,), self.registry
        # The five figures every request moves: lock-free series (gateway/edge/light_series.py), ~3 µs a request less.
        self.requests = LightCounter(f"{prefix}_requests", f"Requests answered, by {subject} and status code",
                                     (subject, "code"), r)
        self.duration = LightHistogram(f"{prefix}_request_duration_seconds", "Whole request time at the proxy", one,
                                       LATENCY_BUCKETS, r)
        self.first_byte = LightHistogram(f"{prefix}_time_to_first_byte_seconds",
                                         "Time until the answer's first body byte left the proxy", one,
                                         LATENCY_BUCKETS, r)
        self.added = LightHistogram(f"{prefix}_added_latency_seconds",
                                    "The proxy's own share of the time to the answer's headers (proxy time minus the "
                                    "copy's)", one, ADDED_BUCKETS, r)
        self.chunks = LightCounter(f"{prefix}_streamed_chunks", "Body chunks relayed to callers", one, r)
        self.refusals = Counter(f"{prefix}_refusals", "Requests the proxy refused itself, by reason",
                                (subject, "reason"), registry=r)
        self.upstream_errors = Counter(f"{prefix}_upstream_errors", "Attempts that got no answer from a copy", one,
                                       registry=r)
        self.retries = Counter(f"{prefix}_retries", "Second attempts (another copy, a restarted LiteLLM)", one,
                               registry=r)
        self.held = Gauge(f"{prefix}_held_requests", "Requests waiting for a copy (scale from zero)", registry=r)
        self.wakeups = Counter(f"{prefix}_wakeups", f"Wake calls sent for {subject}s scaled to zero", one,
                               registry=r)
        # Each request's labelled series, looked up once per endpoint (and code) rather than five `labels()`
        # calls a request (each takes the metric's lock and builds its key): ~8 µs of every request.
        self._series: dict[str, tuple[Any, Any, Any, Any]] = {}
        self._counted: dict[tuple[str, int], Any] = {}

    def watch(self, send: Send) -> tuple[Send, RequestClock]:
        """`send` that notes the first body byte and counts the chunks, and the clock it notes them on."""
        clock = RequestClock()
        if not self.enabled:
            return send, clock

        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                clock.on_start(message)
            elif body := message.get("body"):
                clock.on_body(body)
            await send(message)

        return watched, clock

    def finished(self, endpoint: str, status: int, proxied: bool, clock: RequestClock) -> None:
        """Count one request; `proxied` when a copy (or the endpoint's service) answered it."""
        if not self.enabled:
            return
        now = time.monotonic()
        counted = self._counted.get((endpoint, status))
        if counted is None:
            if len(self._counted) >= SERIES_KEPT:
                self._counted.clear()
            counted = self._counted[(endpoint, status)] = self.requests.labels(endpoint, str(status or 0))
        counted.inc()
        series = self._series.get(endpoint)
        if series is None:
            if len(self._series) >= SERIES_KEPT:
                self._series.clear()
            series = self._series[endpoint] = (self.duration.labels(endpoint), self.first_byte.labels(endpoint),
                                               self.chunks.labels(endpoint), self.added.labels(endpoint))
        duration, first_byte, chunks, added = series
        duration.observe(now - clock.started)
        if clock.first_byte is not None:
            first_byte.observe(clock.first_byte - clock.started)
        if clock.chunks:
            chunks.inc(clock.chunks)
        if clock.upstream_headers_s is not None and clock.answered is not None:
            own = (clock.answered - clock.started) - clock.upstream_headers_s
            added.observe(max(own, 0.0))
        if not proxied and status in REFUSALS:
            self.refusals.labels(endpoint, REFUSALS[status]).inc()

    def woke(self, endpoint_id: str) -> None:
        if self.enabled:
            self.wakeups.labels(endpoint_id).inc()

    def count_held(self, held: Callable[[], int]) -> None:
        """Read the held requests at each scrape (the hold loop keeps the count; nothing is done per request)."""
        self.held.set_function(held)

    def upstream_failed(self, endpoint_id: str) -> None:
        if self.enabled:
            self.upstream_errors.labels(endpoint_id).inc()

    def retried(self, endpoint_id: str) -> None:
        if self.enabled:
            self.retries.labels(endpoint_id).inc()

    def label(self, endpoint_id: str, known: Callable[[str], bool]) -> str:
        return endpoint_id if known(endpoint_id) else UNKNOWN

    async def serve(self, scope: dict[str, Any], send: Send) -> None:
        """Prometheus's text format, for a scraper on this machine only: the figures name endpoints, which are
        no business of the callers the public port serves (a remote Prometheus scrapes through a local agent
        or an SSH tunnel)."""
        if not self.enabled:
            await plain(send, 404, b"Metrics are off (BERTH_METRICS=off)")
            return
        client = scope.get("client") or ("", 0)
        if client[0] not in LOOPBACK:
            await plain(send, 403, b"Metrics are served to loopback callers only")
            return
        body = generate_latest(self.registry)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
