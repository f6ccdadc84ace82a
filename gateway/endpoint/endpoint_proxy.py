"""EndpointProxy: the single public entry — authenticate the caller (an endpoint token, or an API key with
its per-key limits: gateway/endpoint/key_gate.py), enforce the endpoint's scope, strip Berth credentials, tell the
service who the caller is (a signed `x-berth-caller` assertion), and stream the request to the endpoint's
service or one of its replicas; each request is recorded in the audit chain, off the hot path
(gateway/endpoint/audit_writer.py), with the tokens its answer reports (gateway/endpoint/usage.py).
A bare ASGI app (no framework) on purpose: it is the hot path for every request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from berth.api_client import ApiClient
from berth.errors import BerthError
from berth.failure_log import FailureLog
from berth.scopes import Scope
from berth.security import Identity, SigningKey, TokenVerifier
from gateway.edge import openai_routes, proxy_tracing
from gateway.edge.asgi import body_stream, deadline, plain
from gateway.edge.credentials import COOKIE_NAME, find_key, find_token
from gateway.edge.exchange import ProxyLimits, admit
from gateway.edge.metrics import MetricsScraper
from gateway.edge.proxy_metrics import ProxyMetrics, RequestClock
from gateway.edge.routing import Replica
from gateway.edge.upstream import Receive, Send, UpstreamError, UpstreamPool, UpstreamResponse, relay
from gateway.endpoint import litellm_keys, litellm_replay, model_cards, retry, session_key
from gateway.endpoint.admission import Admission, limiter_from_settings, refuse, saying_priority_denied
from gateway.endpoint.audit_writer import AuditedRequest, AuditWriter
from gateway.endpoint.error_answers import forbidden, upstream_failed
from gateway.endpoint.hold import HELD_POLL_S, WAKE_EVERY_S, Holds
from gateway.endpoint.key_gate import KeyedRequest, KeyGate, KeyRefusal
from gateway.endpoint.limits import Limiter, Refused, Ticket
from gateway.endpoint.load_report import LoadCounts, Outcome, answered, failed, report_forever
from gateway.endpoint.route_table import Route, build_route
from gateway.endpoint.token_identity import TokenIdentities
from gateway.endpoint.upstream_headers import CallerHeaders
from gateway.endpoint.upstream_headers import to_target as _to
from gateway.endpoint.usage import UsageMeter, charged_tokens

log = logging.getLogger("berth.proxy")

STREAMED = re.compile(rb'"stream"\s*:\s*true')

__all__ = ["COOKIE_NAME", "WAKE_EVERY_S", "EndpointProxy", "Route", "find_token"]  # what callers import here


class EndpointProxy:
    def __init__(self, api: ApiClient, verifier: TokenVerifier, upstream: UpstreamPool | None = None,
                 refresh_s: float = 1.0, signer: SigningKey | None = None, limiter: Limiter | None = None,
                 metrics: ProxyMetrics | None = None) -> None:
        self.api = api
        self.verifier = verifier
        self.caller_headers = CallerHeaders(verifier, signer)  # signer None: no caller assertions
        self.keys = KeyGate(api)
        self.admission = Admission(limiter or limiter_from_settings())  # the cluster's limits, BERTH_LIMITS_FILE
        self.upstream = upstream or UpstreamPool()
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
        self.metrics = metrics or ProxyMetrics()  # at /metrics for loopback callers (docs/operations.md)
        self.holds = Holds(api, lambda route: self.routes.get(route.id, route), self._look_again, self.metrics.woke)
        self.metrics.count_held(lambda: sum(self.holds.held.values()))
        # LiteLLM-fronted pools this proxy has seen serving: once one has, a moment with no routable copy
        # (its only copy died and is being re-placed) holds requests instead of passing LiteLLM's 400.
        self._served: set[str] = set()
        self.scraper = MetricsScraper(self._scrape_targets)
        # ATTEMPT, then SUCCESS or FAILED, per endpoint request; posted in batches by a background task.
        self.audit = AuditWriter(lambda records: self.api.append_audit(records))
        self.limits = ProxyLimits()  # body size, upstream deadline, stream idle (gateway/edge/exchange.py)
        self.tracing = proxy_tracing.ProxyTracing()  # x-request-id; spans with BERTH_OTEL_ENDPOINT

    @property
    def hold_timeout_s(self) -> float:
        return self.holds.timeout_s

    @hold_timeout_s.setter
    def hold_timeout_s(self, value: float) -> None:
        self.holds.timeout_s = value

    async def _look_again(self, age_s: float) -> None:
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
            self._served.update(r.id for r in routes.values() if r.fronts_pool and r.serving())
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

    async def _route(self, endpoint_id: str) -> Route | None:
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
        audited = self.audit.request(endpoint_id)
        traced = self.tracing.begin(scope, audited.endpoint_id, audited.request_id)  # x-request-id, span
        meter = UsageMeter()  # the answer's usage: the audit row's tokens, a key's tokens per minute
        timed, clock = self.metrics.watch(traced.watch(send))
        try:
            await self._endpoint(traced.scope, receive, meter.watch(audited.watch(timed)), endpoint_id, rest,
                                 audited, meter, clock)
        finally:
            usage = meter.usage()
            if usage is not None:
                audited.tokens_in, audited.tokens_out = usage.prompt, usage.completion
            audited.end()
            traced.end(audited.copy_id, (audited.tokens_in, audited.tokens_out))
            self.metrics.finished(self.metrics.label(endpoint_id, self.routes.__contains__), audited.status,
                                  audited.copy_id is not None, clock)

    async def _endpoint(self, scope: dict[str, Any], receive: Receive, send: Send, endpoint_id: str, rest: str,
                        audited: AuditedRequest, meter: UsageMeter, clock: RequestClock) -> None:
        route = await self._route(endpoint_id)
        if route is None:
            await plain(send, 404, b"Unknown endpoint")
            return
        if await litellm_keys.serve(self, route, scope, receive, send, rest):  # LiteLLM's /key/* from Berth's keys
            return
        if route.service in openai_routes.MODEL_UPSTREAMS and await openai_routes.refused(send, rest):
            return  # only the OpenAI routes reach a copy: the rest of vLLM's answer without its key
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        keyed: KeyedRequest | None = None
        presented = find_key(headers)
        if presented is not None:
            try:
                keyed = await self.keys.check(presented, endpoint_id, receive)
            except KeyRefusal as refusal:
                audited.key_id = refusal.key_id
                await refusal.answer(send)
                return
            identity: Identity | None = keyed.identity
            strip_authorization, receive, audited.key_id = True, keyed.receive, keyed.verdict.key_id
        else:
            identity, strip_authorization = self.tokens.of(headers, endpoint_id, route.revoked_tokens)
        audited.user = identity.user if identity is not None else None  # a refusal names whom it refused
        if route.scope is Scope.PUBLIC:
            # Public: everyone passes; a token only identifies a caller of the endpoint's organization.
            if identity is not None and identity.org != route.org:
                identity = None
        else:
            if identity is None:
                await plain(send, 401, b"Unauthorized")
                return
            if not route.admits(identity):
                await plain(send, 403, forbidden(endpoint_id, route).encode())
                return
        ticket: Ticket | None = None
        body = keyed.body if keyed is not None else None
        try:
            # After the scope check (a refused caller counts nowhere); the key's quota last (a request the
            # limits refuse spends none of it).
            admitted = await self.admission.admit(route, headers, identity, keyed.verdict if keyed else None,
                                                  body, receive)
            ticket, receive, body = admitted.ticket, admitted.receive, admitted.body
            if admitted.priority_denied:
                send = saying_priority_denied(send)
            if keyed is not None:
                await self.keys.spend(keyed.verdict)
            await self._admitted(scope, receive, send, route, rest, headers, strip_authorization, identity, audited,
                                 clock)
        except KeyRefusal as refusal:
            await refusal.answer(send)
        except Refused as refused:
            await refuse(refused, send)
        finally:
            if ticket is not None:  # whatever ended it: the answer, a client gone mid-stream, an error
                await ticket.finish(charged_tokens(meter.usage(), body))

    async def _admitted(self, scope: dict[str, Any], receive: Receive, send: Send, route: Route, rest: str,
                        headers: list[tuple[bytes, bytes]], strip_authorization: bool, identity: Identity | None,
                        audited: AuditedRequest, clock: RequestClock) -> None:
        audited.admit(identity.user if identity is not None else None)
        limits = self.admission.exchange_limits(self.limits, route.limits)  # its body limit: the LimitPolicy's
        if (exchange := await admit(limits, route.service, route.id, headers, receive, send)) is None:
            return  # answered: 400 (x-request-timeout outside 1-300 s) or 413 (a Content-Length over the limit)
        if route.wakeable:
            self.load.admitted(route.id)
        session_id = await session_key.of_request(route, headers, exchange)  # x-session-id or the prompt's hash
        target = route.target(session_id) or await self.holds.when_none_routable(route, send, headers, session_id,
                                                                                 self._served)
        if target is None:
            return  # answered: 503 (nothing to wait for, or the deadline passed) or 429 (too many waiting)
        audited.copy_id = target.copy_id
        await exchange.run(self._forward(scope, exchange.receive, exchange.send, route, target, rest, headers,
                                         strip_authorization, session_id, identity, clock))

    async def _forward(self, scope: dict[str, Any], receive: Receive, send: Send, route: Route,
                       target: Replica, rest: str, headers: list[tuple[bytes, bytes]],
                       strip_authorization: bool, session_id: str | None = None,
                       identity: Identity | None = None, clock: RequestClock | None = None) -> None:
        upstream_headers, renewed = self.caller_headers.build(headers, strip_authorization, identity, route.id)
        path = f"/{rest}"
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("latin-1")
        first = await receive()
        body: bytes | AsyncIterator[bytes]
        if first.get("more_body"):
            body = body_stream(first.get("body", b""), receive)
        else:
            body = first.get("body", b"")
        # One retry on another replica when nothing reached the client and the request can be replayed:
        # a whole body in hand and not a streamed completion.
        retriable = isinstance(body, bytes) and not STREAMED.search(body)
        method = scope["method"]
        before = route.routable() if route.fronts_pool else None  # its copies as it goes in
        target.in_flight += 1
        outcome, sent_at = self._sent(route, target), time.monotonic()
        try:
            try:
                response = await self.upstream.request(method, target.url + path, _to(target, upstream_headers),
                                                       body)
                answered(outcome, response.status, time.monotonic() - sent_at)
                if clock is not None:
                    clock.upstream_headers_s = time.monotonic() - sent_at
            except UpstreamError as error:
                failed(outcome)
                self.metrics.upstream_failed(route.id)
                log.warning("upstream %s failed: %s", target.url, error)
                target.metrics.failed_at = time.monotonic()  # out until a scrape succeeds again
                second = await self._second_try(route, target, error, retriable, session_id, method, path,
                                                renewed, body, headers)
                if second is None:
                    await upstream_failed(send, route, target)
                    return
                target.in_flight -= 1
                self.metrics.retried(route.id)
                target, response = second
                answered(self._sent(route, target), response.status, 0.0)  # its time is the retry's, not TTFT
                target.in_flight += 1
            else:
                if retriable and route.fronts_pool and target.copy_id == "service":
                    answer = await litellm_replay.read_error(response)
                    if answer is not None:
                        replayed = await self._replay_lost(answer, route, target, method, path,
                                                           renewed, body, headers, before)
                        if replayed is None:
                            await answer.send(send)
                            return
                        response = replayed
            if model_cards.is_listing(method, rest):
                await model_cards.relay_listing(response, send, log, target.url)  # no state-dir paths
            else:
                await relay(response, send, log, "upstream", target.url, receive)
        finally:
            target.in_flight -= 1

    def _sent(self, route: Route, target: Replica) -> Outcome | None:
        """The counters of a pool copy this request goes to (None for a service: no revision to judge)."""
        return None if target.copy_id == "service" or not route.pool else self.load.sent(route.id, target.copy_id)

    async def _replay_lost(self, answer: litellm_replay.BufferedAnswer, route: Route, target: Replica, method: str,
                           path: str, renewed: Callable[[], list[tuple[bytes, bytes]]],
                           body: bytes | AsyncIterator[bytes], headers: list[tuple[bytes, bytes]],
                           before: frozenset[str] | None,
                           ) -> UpstreamResponse | None:
        """LiteLLM lost this completion with a dying copy: send it once more when its routed copies have
        changed; None when it is not such a loss (or no copy came back), and the answer is relayed."""
        if not isinstance(body, bytes) or not answer.lost_with_copy():
            return None

        async def look() -> tuple[frozenset[str], frozenset[str] | None]:
            await self._look_again(HELD_POLL_S)
            now = self.routes.get(route.id, route)
            return now.ready_copies(), now.litellm_routed

        if not await litellm_replay.settle(look, before, deadline(self.hold_timeout_s, headers)):
            return None
        url = self.routes.get(route.id, route).service_url or target.url
        log.info("LiteLLM lost a completion of endpoint %s with a dying copy; sending it once more", route.id)
        try:
            return await self.upstream.request(method, url + path, _to(target, renewed()), body)
        except UpstreamError as error:
            log.warning("the replay to LiteLLM at %s failed: %s", url, error)
            return None

    async def _second_try(self, route: Route, target: Replica, error: UpstreamError, retriable: bool,
                          session_id: str | None, method: str, path: str,
                          renewed: Callable[[], list[tuple[bytes, bytes]]], body: bytes | AsyncIterator[bytes],
                          headers: list[tuple[bytes, bytes]],
                          ) -> tuple[Replica, UpstreamResponse] | None:
        """After a first attempt that got no answer: wait for the endpoint's restarting LiteLLM, or send a
        replayable pool request once to another copy."""
        if not isinstance(body, bytes) or not (error.sent_nothing or retriable):
            return None
        if route.fronts_pool and target.copy_id == "service":
            def service_url() -> str | None:
                return self.routes.get(route.id, route).service_url or None
            return await retry.await_service(self.upstream, service_url, method, path, renewed, body,
                                                  deadline(min(self.hold_timeout_s, self.holds.front_hold_s),
                                                           headers), log,
                                                  # its one replay is spent when LiteLLM died with this request
                                                  replayable=error.refused)
        if not error.sent_nothing:
            return None
        if not (retriable and route.pool):
            return None
        other = route.target(session_id, exclude=frozenset({target.copy_id}))
        now = renewed()
        return await retry.other_copy(self.upstream, other, method, path, _to(other, now) if other else now,
                                           body, log)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._refresher = asyncio.create_task(self._refresh_forever())
                self.scraper.start()
                self._reporter = asyncio.create_task(report_forever(self.api, self.load))
                self.audit.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._refresher is not None:
                    self._refresher.cancel()
                if self._reporter is not None:
                    self._reporter.cancel()
                await self.scraper.aclose()
                await self.audit.aclose()  # what waits is posted before the API client closes
                await self.admission.aclose()
                await self.upstream.aclose()
                await self.api.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

