"""EndpointProxy: the single public entry — authenticate the caller, enforce the endpoint's scope,
strip Berth credentials, tell the service who the caller is (a signed `x-berth-caller` assertion), and
stream the request to the endpoint's service or one of its replicas.

A bare ASGI app (no framework) on purpose: it is the hot path for every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

from berth.api_client import ApiClient
from berth.contracts import RouteReplica
from berth.errors import AuthenticationError, BerthError
from berth.failure_log import FailureLog
from berth.scopes import Scope, in_scope
from berth.security import Identity, SigningKey, TokenVerifier, endpoint_audience
from gateway import model_cards, routing, second_try
from gateway.credentials import COOKIE_NAME, strip_berth_credentials
from gateway.metrics import MetricsScraper
from gateway.routing import Replica, ReplicaMetrics
from gateway.upstream import HOP_BY_HOP, Receive, Send, UpstreamError, UpstreamPool, UpstreamResponse, relay

log = logging.getLogger("berth.proxy")

CALLER_HEADER = b"x-berth-caller"
# A client's own x-berth-caller is always dropped: only this proxy may speak for a caller.
STRIPPED_REQUEST = HOP_BY_HOP | {b"berth-authorization", CALLER_HEADER}
# A request for a pool with no routable copy waits this long at most (x-request-timeout shortens it).
HOLD_TIMEOUT_S = 120.0
LITELLM_SYNC_SETTLE_S = 1.5
AWAKE_ANSWER_TTL_S = 2.0  # how long a LiteLLM-fronted pool's "not asleep" answer is trusted
HELD_POLL_S = 0.05  # while requests are held: how often to look for a routable copy (a routes read)
MAX_HELD_PER_ENDPOINT = 100
WAKE_EVERY_S = 5.0  # re-send the wake-up while requests wait (a lost signal must not strand them)
STREAMED = re.compile(rb'"stream"\s*:\s*true')
ASSERTION_TTL_S = 60.0
# An assertion is reused this long (signing costs ~50 µs; the hot path signs at most twice a minute
# per caller and endpoint), leaving it ≥ 30 s of life when it reaches the service.
ASSERTION_REUSE_S = 30.0


@dataclass
class Route:
    id: str
    scope: Scope
    owner: str
    org: str
    groups: frozenset[str]
    service_url: str | None
    replicas: list[str]
    counter: itertools.count = field(default_factory=itertools.count)  # type: ignore[type-arg]
    workflow_id: str = ""
    pool: list[Replica] = field(default_factory=list)  # every published copy, draining ones included
    policy: routing.Policy = field(default_factory=routing.RoundRobin)
    wakeable: bool = False  # a replica pool (not a service): a request may wake it from zero
    service: str = "vllm"
    litellm_routed: frozenset[str] | None = None  # copies LiteLLM routes to; None: not reported yet

    def target(self, session_id: str | None = None, exclude: frozenset[str] = frozenset()) -> Replica | None:
        """The service, or the replica the endpoint's routing policy picks among the eligible ones."""
        if self.service_url:
            return Replica(copy_id="service", url=self.service_url) if self._any_ready() else None
        if self.service == "litellm":
            return None  # a pool behind LiteLLM is never reached around it (its key would be bypassed)
        if self.pool:
            return routing.choose(self.policy, self.pool, time.monotonic(), session_id, exclude)
        if not self.replicas:  # a control plane that lists no pool details: plain round robin
            return None
        url = self.replicas[next(self.counter) % len(self.replicas)]
        return Replica(copy_id=url, url=url)

    def _any_ready(self) -> bool:
        """A service in front of a pool (LiteLLM) is worth calling only once the pool has a ready copy;
        until then the request is held and the pool woken, as for a pool without a service."""
        if not self.wakeable:
            return True
        if self.service == "litellm" and self.litellm_routed is not None:
            return any(r.ready and not r.draining and r.copy_id in self.litellm_routed for r in self.pool)
        return any(r.ready and not r.draining for r in self.pool)  # a pool at zero has none: hold

    def admits(self, who: Identity) -> bool:
        return in_scope(self.scope, self.owner, self.org, self.groups, who)


def find_token(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, bool]:
    """The caller's Berth token from the first of: console cookie, `Berth-Authorization`,
    `Authorization: Bearer`. Returns (token, whether it came from Authorization)."""
    cookie = berth_header = bearer = None
    for name, value in headers:
        if name == b"cookie" and cookie is None:
            jar: SimpleCookie = SimpleCookie()
            with contextlib.suppress(Exception):
                jar.load(value.decode("latin-1"))
            if COOKIE_NAME in jar:
                cookie = jar[COOKIE_NAME].value
        elif name == b"berth-authorization" and berth_header is None:
            text = value.decode("latin-1").strip()
            berth_header = text[7:].strip() if text.lower().startswith("bearer ") else text
        elif name == b"authorization" and bearer is None:
            text = value.decode("latin-1").strip()
            if text.lower().startswith("bearer "):
                bearer = text[7:].strip()
    if cookie:
        return cookie, False
    if berth_header:
        return berth_header, False
    return bearer, bearer is not None


class EndpointProxy:
    def __init__(self, api: ApiClient, verifier: TokenVerifier, upstream: UpstreamPool | None = None,
                 refresh_s: float = 1.0, signer: SigningKey | None = None) -> None:
        self.api = api
        self.verifier = verifier
        self.signer = signer  # None: no caller assertions (the service then wants a key)
        self._assertions: dict[tuple[Identity, str], tuple[bytes, float]] = {}
        self.upstream = upstream or UpstreamPool()
        self.refresh_s = refresh_s
        self.routes: dict[str, Route] = {}
        self._last_refresh = 0.0
        self._refresh_lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None
        self._verified: dict[tuple[str, str], tuple[Identity, float]] = {}
        self.hold_timeout_s = HOLD_TIMEOUT_S
        self.max_held = MAX_HELD_PER_ENDPOINT
        # Load figures outlive routing-table refreshes: keyed by copy id (a copy's URL never changes).
        self._replicas: dict[str, Replica] = {}
        # Per endpoint, not per Route: a refresh replaces Route objects while requests are held.
        self._held: dict[str, int] = {}
        # Requests admitted per pool endpoint since the last report: the autoscaler's rate and idle clock.
        self._arrivals: dict[str, int] = {}
        self._reporter: asyncio.Task[None] | None = None
        self._last_wake: dict[str, float] = {}
        self._woken_at: dict[str, float] = {}  # when this proxy woke a LiteLLM-fronted pool from zero
        self._waking: dict[str, asyncio.Future[bool]] = {}
        self._awake_until: dict[str, float] = {}  # a pool that said "not asleep", until when to believe it
        self.scraper = MetricsScraper(self._scrape_targets)

    def _scrape_targets(self) -> list[tuple[str, ReplicaMetrics]]:
        return [(r.url, r.metrics) for r in self._replicas.values()]

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
                old = self.routes.get(item.id)
                pool = [self._replica(entry, known) for entry in item.pool]
                policy_name = item.routing_policy or routing.DEFAULT_POLICY
                keep_policy = old is not None and old.policy.name == policy_name
                routes[item.id] = Route(
                    id=item.id, scope=Scope(item.scope), owner=item.owner, org=item.org,
                    groups=frozenset(item.groups), service_url=item.service_url,
                    replicas=list(item.replicas),
                    counter=old.counter if old else itertools.count(),
                    workflow_id=item.workflow_id, pool=pool,
                    policy=old.policy if old is not None and keep_policy else routing.make_or_default(policy_name),
                    wakeable=item.wakeable,
                    service=item.service or "vllm",
                    litellm_routed=None if item.litellm_routed is None else frozenset(item.litellm_routed),
                )
            self._replicas = known
            # A copy that just became ready is scraped now, not at the next round: it serves at once.
            fresh = [r for r in known.values() if r.ready and r.metrics.scraped_at is None]
            if fresh:
                await asyncio.gather(*(self.scraper.scrape_now(r.url, r.metrics) for r in fresh))
            self.routes = routes
            self._last_refresh = time.monotonic()

    def _replica(self, entry: RouteReplica, known: dict[str, Replica]) -> Replica:
        replica = self._replicas.get(entry.copy_id)
        if replica is None or replica.url != entry.url:
            replica = Replica(copy_id=entry.copy_id, url=entry.url)
        replica.ready, replica.draining = entry.ready, entry.draining
        replica.api_key = entry.api_key
        known[replica.copy_id] = replica
        return replica

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
            not route.service_url and (route.service == "litellm" or not route.replicas))
        if stale and time.monotonic() - self._last_refresh > 0.2:
            with contextlib.suppress(BerthError):
                await self.refresh()
            route = self.routes.get(endpoint_id)
        return route

    def _identity(self, token: str, endpoint_id: str) -> Identity:
        key = (token, endpoint_id)
        cached = self._verified.get(key)
        now = time.time()
        if cached is not None and cached[1] > now:
            return cached[0]
        claims = self.verifier.verify(token, endpoint_audience(endpoint_id))
        identity = Identity.from_claims(claims)
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[key] = (identity, float(claims["exp"]))
        return identity

    def _assertion(self, identity: Identity, endpoint_id: str) -> bytes | None:
        if self.signer is None:
            return None
        key = (identity, endpoint_id)
        now = time.monotonic()
        cached = self._assertions.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        token = self.signer.caller_assertion(identity, endpoint_id, ASSERTION_TTL_S).encode()
        if len(self._assertions) > 10_000:
            self._assertions.clear()
        self._assertions[key] = (token, now + ASSERTION_REUSE_S)
        return token

    # --- ASGI -------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        path: str = scope["path"]
        if path == "/healthz":
            await _plain(send, 200, b"ok")
            return
        if not path.startswith("/endpoints/"):
            await _plain(send, 404, b"Not Found")
            return
        endpoint_id, _, rest = path[len("/endpoints/"):].partition("/")
        route = await self._route(endpoint_id)
        if route is None:
            await _plain(send, 404, b"Unknown endpoint")
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        token, from_authorization = find_token(headers)
        identity: Identity | None = None
        if token:
            try:
                identity = self._identity(token, endpoint_id)
            except AuthenticationError:
                identity = None
        # A valid Berth token is consumed here even when it identifies nobody to the service.
        strip_authorization = from_authorization and identity is not None
        if route.scope is Scope.PUBLIC:
            # Public: everyone passes; a token only identifies a caller of the endpoint's organization.
            if identity is not None and identity.org != route.org:
                identity = None
        else:
            if identity is None:
                await _plain(send, 401, b"Unauthorized")
                return
            if not route.admits(identity):
                await _plain(send, 403, _forbidden(endpoint_id, route).encode())
                return
        if route.wakeable:
            self._arrivals[endpoint_id] = self._arrivals.get(endpoint_id, 0) + 1
        session_id = _header(headers, b"x-session-id")
        target = route.target(session_id)
        if target is None:
            if not route.wakeable:
                await _json(send, 503, b'{"error":{"message":"No replica of this endpoint is ready yet; '
                                       b'retry shortly.","type":"service_unavailable","code":503}}')
                return
            if route.service == "litellm" and route.service_url and not await self._asleep(route):
                # Copies are already wanted (starting, or waiting for capacity), not asleep: LiteLLM
                # answers as the documents say ("Invalid model name", an empty /v1/models).
                target = Replica(copy_id="service", url=route.service_url)
            else:
                target = await self._hold(route, send, headers, session_id)
            if target is None:
                return  # answered: 429 (too many waiting) or 503 (deadline passed)
        caller = self._assertion(identity, endpoint_id) if identity is not None else None
        await self._forward(scope, receive, send, route, target, rest, headers, strip_authorization, session_id,
                            caller)

    async def _hold(self, route: Route, send: Send, headers: list[tuple[bytes, bytes]],
                    session_id: str | None) -> Replica | None:
        """Hold a request for a pool with no routable copy: wake the pool, then wait for a copy until
        the deadline (120 s, or less with `x-request-timeout`). Capped per endpoint."""
        if self._held.get(route.id, 0) >= self.max_held:
            await _json(send, 429, b'{"error":{"message":"Too many requests are waiting for this endpoint '
                                   b'to wake up; retry later.","type":"too_many_requests","code":429}}',
                        [(b"retry-after", b"5")])
            return None
        deadline_s = _deadline(self.hold_timeout_s, headers)
        started = time.monotonic()
        self._held[route.id] = self._held.get(route.id, 0) + 1
        try:
            while True:
                route = self.routes.get(route.id, route)  # a refresh may have replaced it
                target = route.target(session_id)
                if target is not None:
                    self._woken_at.pop(route.id, None)
                    if route.service == "litellm" and route.litellm_routed is None:
                        # LiteLLM has not reported which copies it routes to (an older hook, or a
                        # control plane restarted since): give its sync poll time to catch up, or the
                        # first request after a wake gets its "Invalid model name".
                        await asyncio.sleep(LITELLM_SYNC_SETTLE_S)
                    return target
                now = time.monotonic()
                if now - self._last_wake.get(route.id, 0.0) >= WAKE_EVERY_S:
                    self._last_wake[route.id] = now
                    asyncio.create_task(self._wake_once(route))
                if now - started >= deadline_s:
                    break
                # Tight while someone waits: every 100 ms of polling is 100 ms on the first reply.
                await asyncio.sleep(min(HELD_POLL_S, max(0.0, deadline_s - (now - started))))
                if time.monotonic() - self._last_refresh > HELD_POLL_S:
                    with contextlib.suppress(BerthError):
                        await self.refresh(unless_newer_than_s=HELD_POLL_S)
        finally:
            self._held[route.id] -= 1
        waited = f"{time.monotonic() - started:.0f}"
        await _json(send, 503, b'{"error":{"message":"No replica of this endpoint became ready within '
                    + waited.encode() + b' s; it is starting, retry shortly.","type":"service_unavailable",'
                    b'"code":503}}', [(b"retry-after", b"10")])
        return None

    async def _report_load_forever(self) -> None:
        """Every second, tell the control plane how many requests each pool endpoint admitted."""
        while True:
            await asyncio.sleep(1.0)
            arrivals, self._arrivals = self._arrivals, {}
            for endpoint_id, count in arrivals.items():
                try:
                    await self.api.report_load(endpoint_id, count)
                except BerthError as error:
                    log.warning("load report for %s failed: %s", endpoint_id, error)

    async def _asleep(self, route: Route) -> bool:
        """Whether a request to this LiteLLM-fronted pool with no ready copy should be held: the pool was
        at zero (this call wakes it) or a wake from here is still under way. Concurrent first requests
        share one wake call, so none of them sees the pool "already waking" and slips past the hold."""
        now = time.monotonic()
        woken_at = self._woken_at.get(route.id)
        if woken_at is not None and now - woken_at < self.hold_timeout_s:
            return True
        if now < self._awake_until.get(route.id, 0.0):
            return False  # asked a moment ago: copies are already wanted (one API call per pool)
        pending = self._waking.get(route.id)
        if pending is None:
            pending = self._waking[route.id] = asyncio.ensure_future(self._wake_once(route))
            pending.add_done_callback(lambda _: self._waking.pop(route.id, None))
        return await asyncio.shield(pending)

    async def _wake_once(self, route: Route) -> bool:
        try:
            reply = await self.api.wake_endpoint(route.id, "a request arrived at the endpoint proxy")
        except BerthError as error:
            log.warning("waking endpoint %s failed: %s", route.id, error)
            return True  # hold: the hold loop keeps trying, and answers 503 at the deadline
        self._last_wake[route.id] = time.monotonic()
        if reply.woken:
            self._woken_at[route.id] = time.monotonic()
            log.info("woke endpoint %s (workflow %s)", route.id, route.workflow_id)
            return True
        self._awake_until[route.id] = time.monotonic() + AWAKE_ANSWER_TTL_S
        return False

    async def _forward(self, scope: dict[str, Any], receive: Receive, send: Send, route: Route,
                       target: Replica, rest: str, headers: list[tuple[bytes, bytes]],
                       strip_authorization: bool, session_id: str | None = None,
                       caller: bytes | None = None) -> None:
        # Every Berth credential goes, whatever its audience: the service's owner must not receive one.
        upstream_headers = [
            (name, value) for name, value in strip_berth_credentials(headers, self.verifier)
            if name not in STRIPPED_REQUEST and not (strip_authorization and name == b"authorization")
        ]
        if caller is not None:
            upstream_headers.append((CALLER_HEADER, caller))
        path = f"/{rest}"
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("latin-1")
        first = await receive()
        body: bytes | AsyncIterator[bytes]
        if first.get("more_body"):
            body = _body_stream(first.get("body", b""), receive)
        else:
            body = first.get("body", b"")
        # One retry on another replica when nothing reached the client and the request can be replayed:
        # a whole body in hand and not a streamed completion.
        retriable = isinstance(body, bytes) and not STREAMED.search(body)
        method = scope["method"]
        target.in_flight += 1
        try:
            try:
                response = await self.upstream.request(method, target.url + path, _to(target, upstream_headers),
                                                       body)
            except UpstreamError as error:
                log.warning("upstream %s failed: %s", target.url, error)
                target.metrics.failed_at = time.monotonic()  # out until a scrape succeeds again
                second = await self._second_try(route, target, error, retriable, session_id, method, path,
                                                upstream_headers, body, headers)
                if second is None:
                    await _upstream_failed(send, route, target)
                    return
                target.in_flight -= 1
                target, response = second
                target.in_flight += 1
            if model_cards.is_listing(method, rest):
                await model_cards.relay_listing(response, send, log, target.url)  # no state-dir paths
            else:
                await relay(response, send, log, "upstream", target.url, receive)
        finally:
            target.in_flight -= 1

    async def _second_try(self, route: Route, target: Replica, error: UpstreamError, retriable: bool,
                          session_id: str | None, method: str, path: str, upstream_headers: list[tuple[bytes, bytes]],
                          body: bytes | AsyncIterator[bytes], headers: list[tuple[bytes, bytes]],
                          ) -> tuple[Replica, UpstreamResponse] | None:
        """After a first attempt that got no answer: wait for the endpoint's restarting LiteLLM, or send a
        replayable pool request once to another copy."""
        if not isinstance(body, bytes) or not (error.sent_nothing or retriable):
            return None
        if route.service == "litellm" and target.copy_id == "service":
            def service_url() -> str | None:
                return self.routes.get(route.id, route).service_url or None
            return await second_try.await_service(self.upstream, service_url, method, path, upstream_headers, body,
                                                  _deadline(self.hold_timeout_s, headers), log,
                                                  # its one replay is spent when LiteLLM died with this request
                                                  replayable=error.refused)
        if not error.sent_nothing:
            return None
        if not (retriable and route.pool):
            return None
        other = route.target(session_id, exclude=frozenset({target.copy_id}))
        return await second_try.other_copy(self.upstream, other, method, path,
                                           _to(other, upstream_headers) if other else upstream_headers, body, log)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._refresher = asyncio.create_task(self._refresh_forever())
                self.scraper.start()
                self._reporter = asyncio.create_task(self._report_load_forever())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._refresher is not None:
                    self._refresher.cancel()
                if self._reporter is not None:
                    self._reporter.cancel()
                await self.scraper.aclose()
                await self.upstream.aclose()
                await self.api.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _to(target: Replica, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A copy of a pool gets its own key as `Authorization`, in place of whatever the client sent; a
    service (LiteLLM, the gateway, OpenCode) gets the headers as they are."""
    if not target.api_key:
        return headers
    return [(name, value) for name, value in headers if name != b"authorization"] + target.authorization()


def _forbidden(endpoint_id: str, route: Route) -> str:
    """The 403 body: which scope shut the caller out."""
    who = {Scope.USER: f"only its owner ({route.owner})", Scope.GROUP: "members of its groups",
           Scope.ORGANIZATION: f"members of organization {route.org}"}.get(route.scope, "")
    return (f"Forbidden: endpoint {endpoint_id} is {route.scope.value}-scoped ({who} may call it) "
            "and you are outside it")


async def _body_stream(first: bytes, receive: Receive) -> AsyncIterator[bytes]:
    if first:
        yield first
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body"):
            return


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _upstream_failed(send: Send, route: Route, target: Replica) -> None:
    """No answer from upstream, nothing sent to the client. A Proxy=true endpoint's LiteLLM that refuses
    or resets the connection is down and being started again (ServiceWorkflow's back-off): 503 with
    Retry-After, as documented (docs/architecture.md), not a 502 that reads as a broken model."""
    if route.service == "litellm" and target.copy_id == "service":
        await _json(send, 503, b'{"error":{"message":"The endpoint\'s LiteLLM proxy is not answering (it is '
                    b'being restarted); retry shortly.","type":"service_unavailable","code":503}}',
                    [(b"retry-after", b"5")])
        return
    await _json(send, 502, b'{"error":{"message":"The model service did not answer; '
                           b'retry shortly.","type":"bad_gateway","code":502}}')


async def _json(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def _deadline(longest_s: float, headers: list[tuple[bytes, bytes]]) -> float:
    """How long a request may be held: `longest_s`, or less when the client says `x-request-timeout`."""
    asked = _header(headers, b"x-request-timeout")
    if asked:
        with contextlib.suppress(ValueError):
            return max(0.0, min(longest_s, float(asked)))
    return longest_s


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1").strip() or None
    return None
