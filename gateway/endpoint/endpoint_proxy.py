"""EndpointProxy: the single public entry. It serves `/healthz` and `/metrics`, keeps the routing table, and sends
each request to `/endpoints/<id>/…` through its pipeline of named steps (gateway/endpoint/pipeline.py: route,
credentials, scope, limits, deadline, hold, forward, retry, relay; one module each under gateway/endpoint/steps/)
as one ProxyRequest (gateway/endpoint/proxy_request.py), whose one observed `send` feeds the audit record
(gateway/endpoint/audit_writer.py, off the hot path), the usage (gateway/endpoint/usage.py), the metrics and the
trace. A bare ASGI app (no framework) on purpose: it is the hot path for every request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from berth.api_client import ApiClient
from berth.errors import BerthError
from berth.failure_log import FailureLog
from berth.security import SigningKey, TokenVerifier
from gateway.edge import openai_routes, proxy_tracing
from gateway.edge.asgi import plain
from gateway.edge.credentials import COOKIE_NAME, find_token
from gateway.edge.exchange import ProxyLimits
from gateway.edge.metrics import MetricsScraper
from gateway.edge.proxy_metrics import ProxyMetrics, RequestClock
from gateway.edge.routing import Replica
from gateway.edge.upstream import Receive, Send, Upstream, UpstreamPool
from gateway.endpoint.admission import Admission, limiter_from_settings
from gateway.endpoint.audit_writer import AuditWriter
from gateway.endpoint.hold import WAKE_EVERY_S, Holds
from gateway.endpoint.key_gate import KeyGate
from gateway.endpoint.limits import Limiter
from gateway.endpoint.load_report import LoadCounts, Outcome, report_forever
from gateway.endpoint.pipeline import Pipeline
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.route_table import Route, build_route
from gateway.endpoint.scrape_report import report_scrapes_forever
from gateway.endpoint.token_identity import TokenIdentities
from gateway.endpoint.upstream_headers import CallerHeaders
from gateway.endpoint.usage import UsageMeter

log = logging.getLogger("berth.proxy")

__all__ = ["COOKIE_NAME", "WAKE_EVERY_S", "EndpointProxy", "Route", "find_token"]  # what callers import here


class EndpointProxy:
    def __init__(self, api: ApiClient, verifier: TokenVerifier, upstream: Upstream | None = None,
                 refresh_s: float = 1.0, signer: SigningKey | None = None, limiter: Limiter | None = None,
                 metrics: ProxyMetrics | None = None) -> None:
        self.api = api
        self.verifier = verifier
        self.caller_headers = CallerHeaders(verifier, signer)  # signer None: no caller assertions
        self.keys = KeyGate(api)
        self.admission = Admission(limiter or limiter_from_settings())  # the cluster's limits, BERTH_LIMITS_FILE
        self.upstream: Upstream = upstream or UpstreamPool()
        self.refresh_s = refresh_s
        self.routes: dict[str, Route] = {}
        self._last_refresh = 0.0
        self._refresh_lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None
        self.tokens = TokenIdentities(verifier)
        # Load figures outlive routing-table refreshes: keyed by copy id (a copy's URL never changes).
        self._replicas: dict[str, Replica] = {}
        # Since the last report: requests admitted per pool endpoint (the autoscaler's rate and idle clock)
        # and how each copy answered (a canary's health).
        self.load = LoadCounts()
        self._reporter: asyncio.Task[None] | None = None
        self._scrape_reporter: asyncio.Task[None] | None = None
        self.metrics = metrics or ProxyMetrics()  # at /metrics for loopback callers (docs/operations.md)
        self.holds = Holds(api, lambda route: self.routes.get(route.id, route), self.look_again, self.metrics.woke)
        self.metrics.count_held(lambda: sum(self.holds.held.values()))
        # LiteLLM-fronted pools this proxy has seen serving: once one has, a moment with no routable copy
        # (its only copy died and is being re-placed) holds requests instead of passing LiteLLM's 400.
        self.served: set[str] = set()
        self.scraper = MetricsScraper(self._scrape_targets)
        # ATTEMPT, then SUCCESS or FAILED, per endpoint request; posted in batches by a background task.
        self.audit = AuditWriter(lambda batch: self.api.append_audit(batch))
        self.limits = ProxyLimits()  # body size, upstream deadline, stream idle (gateway/edge/exchange.py)
        self.tracing = proxy_tracing.ProxyTracing()  # x-request-id; spans with BERTH_OTEL_ENDPOINT
        self.pipeline = Pipeline(self)  # the steps of a request to an endpoint, made and linked once

    @property
    def hold_timeout_s(self) -> float:
        return self.holds.timeout_s

    @hold_timeout_s.setter
    def hold_timeout_s(self, value: float) -> None:
        self.holds.timeout_s = value

    async def look_again(self, age_s: float) -> None:
        """Refresh the routing table unless it is younger than `age_s` (held requests share one read)."""
        if time.monotonic() - self._last_refresh > age_s:
            with contextlib.suppress(BerthError):
                await self.refresh(unless_newer_than_s=age_s)

    def _scrape_targets(self) -> list[Replica]:
        return list(self._replicas.values())

    # --- routing table ----------------------------------------------------------------------------
    async def refresh(self, unless_newer_than_s: float = 0.0) -> None:
        async with self._refresh_lock:
            # Many held requests poll at once: the first refresh serves the ones queued behind it.
            if unless_newer_than_s and time.monotonic() - self._last_refresh < unless_newer_than_s:
                return
            data = await self.api.routes()
            routes: dict[str, Route] = {}
            known: dict[str, Replica] = {}
            for item in data.endpoints:
                routes[item.id] = build_route(item, self.routes.get(item.id), known, self._replicas)
            self._replicas = known
            # A copy that just became ready is scraped now, not at the next round: it serves at once.
            fresh = [r for r in known.values() if r.ready and r.metrics.scraped_at is None]
            if fresh:
                await asyncio.gather(*(self.scraper.scrape_now(r) for r in fresh))
            self.routes = routes
            self.served.update(r.id for r in routes.values() if r.fronts_pool and r.serving())
            self._last_refresh = time.monotonic()

    async def _refresh_forever(self) -> None:
        failures = FailureLog(log, "route refresh")  # the API down: not one line per second
        while True:
            try:
                await self.refresh()
            except BerthError as error:
                failures.failed(error)
            else:
                failures.succeeded()
            await asyncio.sleep(self.refresh_s)

    async def route(self, endpoint_id: str) -> Route | None:
        route = self.routes.get(endpoint_id)
        # Unknown, or known with nothing to route to: a replica or the endpoint's LiteLLM proxy may have
        # been published since the last refresh (the workflow says ready before the periodic refresh
        # sees it), so look again.
        stale = route is None or (
            not route.service_url and (route.fronts_pool or not route.replicas))
        if stale and time.monotonic() - self._last_refresh > 0.2:
            with contextlib.suppress(BerthError):
                await self.refresh()
            route = self.routes.get(endpoint_id)
        return route

    # --- ASGI -------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind == "websocket":
            await openai_routes.refuse_websocket(scope, send)
            return
        if kind != "http":
            return
        path: str = scope["path"]
        if path == "/healthz":
            await plain(send, 200, b"ok")
            return
        if path == "/metrics":
            await self.metrics.serve(scope, send)
            return
        if not path.startswith("/endpoints/"):
            await plain(send, 404, b"Not Found")
            return
        endpoint_id, _, rest = path[len("/endpoints/"):].partition("/")
        audit = self.audit.request(endpoint_id)
        trace = self.tracing.begin(scope, audit.endpoint_id, audit.request_id)  # x-request-id, span
        # The answer's usage (the audit row's tokens, a key's tokens per minute) and its moments (metrics).
        request = ProxyRequest(trace, receive, send, endpoint_id, rest, audit, UsageMeter(), RequestClock(),
                               self.metrics.enabled)
        try:
            await self.pipeline(request)
        finally:
            self._finished(request)

    def _finished(self, request: ProxyRequest) -> None:
        """The request's records, whatever ended it: its audit row, its span, its metrics."""
        audit = request.audit
        usage = request.meter.usage()
        if usage is not None:
            audit.tokens_in, audit.tokens_out = usage.prompt, usage.completion
        audit.end()
        request.trace.end(audit.copy_id, (audit.tokens_in, audit.tokens_out))
        self.metrics.finished(self.metrics.label(request.endpoint_id, self.routes.__contains__), audit.status,
                              audit.copy_id is not None, request.clock)

    def sent(self, route: Route, target: Replica) -> Outcome | None:
        """The counters of a pool copy this request goes to (None for a service: no revision to judge)."""
        return None if target.copy_id == "service" or not route.pool else self.load.sent(route.id, target.copy_id)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._refresher = asyncio.create_task(self._refresh_forever())
                self.scraper.start()
                self._reporter = asyncio.create_task(report_forever(self.api, self.load))
                self._scrape_reporter = asyncio.create_task(report_scrapes_forever(self.api, self._scrape_targets))
                self.audit.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._refresher is not None:
                    self._refresher.cancel()
                for task in (self._reporter, self._scrape_reporter):
                    if task is not None:
                        task.cancel()
                await self.scraper.aclose()
                await self.audit.aclose()  # what waits is posted before the API client closes
                await self.admission.aclose()
                await self.upstream.aclose()
                await self.api.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

