"""ModelGateway: one OpenAI base URL for every model its owner may reach — discovers the annotated
replicas of `Proxy=false` pools through the endpoints API, routes by the request's `model` with the
shared routing policies, follows pools as they scale and wakes pools at zero.

A bare ASGI app like the endpoint proxy (same upstream client, same routing and metrics modules)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from opentelemetry import trace

from berth.api_client import ApiClient
from berth.bounded_parse import TooDeep
from berth.errors import BerthError
from berth.http_connection import guarded_protocol
from berth.kinds import ProcessKind
from berth.log_format import configure_logging
from berth.security import TokenVerifier
from berth.settings import ProxyLimits, limit_policy, metrics_enabled
from berth.settings.connections import ConnectionLimits
from berth.telemetry import setup_tracing
from gateway.edge import openai_routes, prompt_key, routing
from gateway.edge.credentials import strip_berth_credentials
from gateway.edge.exchange import admit, held_for
from gateway.edge.litellm_contract import invalid_model, model_listing
from gateway.edge.master_key import KEY_HEADERS, MasterKeyGate
from gateway.edge.metrics import MetricsScraper
from gateway.edge.proxy_metrics import ProxyMetrics, RequestClock
from gateway.edge.proxy_tracing import ProxyTracing, traced
from gateway.edge.upstream import HOP_BY_HOP, Receive, Send, Upstream, UpstreamError, UpstreamPool, relay
from gateway.models.discovery import WAKE_REFRESH_S, Pool, PoolDiscovery

log = logging.getLogger("berth.gateway")

# Credentials meant for Berth or for this gateway (its master key) never go on to the model servers.
STRIPPED = HOP_BY_HOP | {b"berth-authorization", b"x-berth-caller", b"cookie", *KEY_HEADERS}
HOLD_DEADLINE_S = 120.0


class ModelGateway:
    def __init__(self, api: ApiClient, upstream: Upstream | None = None, refresh_s: float = 2.0,
                 hold_deadline_s: float = HOLD_DEADLINE_S, keys_api: ApiClient | None = None,
                 routing_policy: str | None = None, gate: MasterKeyGate | None = None,
                 limits: ProxyLimits | None = None, metrics: ProxyMetrics | None = None) -> None:
        self.api = api
        # At /metrics for loopback callers, by model (docs/operations.md); `held` counts requests waking a pool.
        self.metrics = metrics or ProxyMetrics(prefix="berth_model_gateway", subject="model")
        self.held = 0
        self.metrics.count_held(lambda: self.held)
        if routing_policy is not None:
            routing.make(routing_policy)  # an unknown name fails at start, listing the valid ones
        # The catalog entry's MasterKeySecret (LiteLLM's contract); None for a bare `berth gateway`.
        self.gate = gate
        self.upstream: Upstream = upstream or UpstreamPool()
        self.refresh_s = refresh_s
        self.hold_deadline_s = hold_deadline_s
        self.limits = limits or ProxyLimits()  # body size, upstream deadline, stream idle (gateway/edge/exchange.py)
        # No keys: a Berth token is recognised by its issuer, enough to strip it from any header.
        self._berth_tokens = TokenVerifier()
        self._scraper = MetricsScraper(lambda: self.discovery.replicas())
        # The copies' keys are read with `keys_api`: a replica-keys token's client, or an administrator's (`api`).
        self.discovery = PoolDiscovery(api, keys_api or api, routing_policy, self._scraper)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def pools(self) -> dict[str, Pool]:
        """The discovered pools by endpoint id."""
        return self.discovery.pools

    async def refresh(self, older_than_s: float = 0.0) -> None:
        """Discover now, unless a round finished less than `older_than_s` ago (gateway/models/discovery.py)."""
        await self.discovery.refresh(older_than_s)

    def models(self) -> list[str]:
        return sorted({pool.model_id for pool in self.pools.values()})

    def pick(self, model: str, session_id: str | None) -> tuple[Pool, routing.Replica] | None:
        now = time.monotonic()
        best: tuple[Pool, routing.Replica] | None = None
        for pool in self.pools.values():
            if pool.model_id != model:
                continue
            replica = routing.choose(pool.policy, list(pool.replicas.values()), now, session_id)
            if replica is not None and (best is None or replica.queue < best[1].queue):
                best = (pool, replica)
        return best

    # --- ASGI -------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            await openai_routes.refuse_websocket(scope, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path in ("/health", "/healthz"):
            await _json(send, 200, self.health())
            return
        if path == "/metrics":
            await self.metrics.serve(scope, send)
            return
        timed, clock = self.metrics.watch(send)
        clock.subject = "none"  # until the body names a model
        try:
            await self._answer(scope, receive, timed, clock)
        finally:
            self.metrics.finished(clock.subject, clock.status, clock.proxied, clock)

    async def _answer(self, scope: dict[str, Any], receive: Receive, send: Send, clock: RequestClock) -> None:
        path: str = scope["path"]
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        refusal = await self.gate.refusal(headers) if self.gate is not None else None
        if refusal is not None:
            await _json(send, *refusal)
            return
        if path in ("/v1/models", "/models"):
            await _json(send, 200, model_listing(self.models()))
            return
        if scope["method"] != "POST":
            await _json(send, 404, _error(f"No route {path}; this gateway serves /v1/models and POST /v1/…", 404))
            return
        if await openai_routes.refused(send, path[1:]):
            return  # the copy key it adds must not reach vLLM's unguarded routes (/tokenize, /invocations, …)
        await self._route(scope, receive, send, clock)

    def health(self) -> dict[str, Any]:
        """Alive, and how far discovery and the copies' scrape have got: counts and times only (the answer
        precedes the master key), so a caller can wait for a round that started after a change it saw,
        instead of sleeping."""
        return {"status": "ok", "discovery": {"rounds": self.discovery.rounds,
                                              "last_round_started_at": self.discovery.last_round_started_at},
                "scrape": {"last_round_started_at": self._scraper.last_round_started_at}}

    async def _route(self, scope: dict[str, Any], receive: Receive, send: Send, clock: RequestClock) -> None:
        """A POST to a ready copy of the pool serving its `model`, waking the pool when none is ready."""
        path: str = scope["path"]
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        exchange = await admit(self.limits, ProcessKind.VLLM, "the model gateway", headers, receive, send)
        if exchange is None:
            return  # answered: 400 (x-request-timeout outside 1-300 s) or 413 (a Content-Length over the limit)
        body = await exchange.whole_body()
        if body is None:
            if exchange.over:
                await exchange.refuse_body()
            return  # or the client left
        try:
            request = prompt_key.parsed(body)
        except TooDeep as error:
            await _json(send, 400, _error(str(error), 400))
            return
        model = request.get("model") if isinstance(request, dict) else None
        if not isinstance(model, str) or not model:
            await _json(send, 400, _error('The request names no "model".', 400))
            return
        # A label only for a model this gateway serves: a caller's made-up name mints no series.
        clock.subject = model if any(p.model_id == model for p in self.pools.values()) else "unknown"
        session = next((v.decode("latin-1") for k, v in headers if k == b"x-session-id"), None)
        if session is None and self._eligible(model) > 1:
            # Hashes: the prompt itself goes nowhere. The whole prompt's only for a policy that reads it.
            session = prompt_key.of_prompt(request, any(p.policy.reads_prompt for p in self.pools.values()
                                                        if p.model_id == model))
        choice = self.pick(model, session)
        if choice is None:
            choice = await self._wake_and_wait(model, session, held_for(self.hold_deadline_s, headers))
        if choice is None:
            await self._refuse_unserved(send, path, model)
            return
        await exchange.run(self._forward(scope, exchange.receive, exchange.send, body, *choice, clock))

    def _eligible(self, model: str) -> int:
        """How many copies a request for `model` may go to now."""
        now = time.monotonic()
        return sum(len(routing.eligible(list(p.replicas.values()), now)) for p in self.pools.values()
                   if p.model_id == model)

    async def _refuse_unserved(self, send: Send, path: str, model: str) -> None:
        if not any(p.model_id == model for p in self.pools.values()):
            # LiteLLM's 400 and text; Berth's reason a pool of that model is not discoverable after it.
            unknown = invalid_model(path, model)
            hint = "; ".join(v for v in self.discovery.not_discoverable.values() if v.startswith(model + " "))
            if hint:
                unknown["error"]["message"] += f" Not discoverable: {hint}"
            await _json(send, 400, unknown)
        else:
            await _json(send, 503, _error(f"No replica of {model} became ready in time; retry.", 503),
                        extra=[(b"retry-after", b"10")])

    async def _forward(self, scope: dict[str, Any], receive: Receive, send: Send, body: bytes, pool: Pool,
                       replica: routing.Replica, clock: RequestClock) -> None:
        forward = [(k, v) for k, v in strip_berth_credentials(scope["headers"], self._berth_tokens)
                   if k not in STRIPPED] + replica.authorization()
        query = scope.get("query_string") or b""
        target = replica.url + scope["path"] + ("?" + query.decode("latin-1") if query else "")
        replica.in_flight += 1
        sent_at = time.monotonic()
        trace.get_current_span().set_attribute("berth.copy", replica.copy_id)  # the request's span (proxy_tracing)
        try:
            try:
                response = await self.upstream.request("POST", target, forward, body)
                clock.upstream_headers_s, clock.proxied = time.monotonic() - sent_at, True
            except UpstreamError as error:
                self.metrics.upstream_failed(pool.model_id)
                failed_at = replica.metrics.failed_at = time.monotonic()
                replica.failures.add(failed_at)
                log.warning("replica %s of %s failed: %s", replica.copy_id, pool.model_id, error)
                await _json(send, 502, _error("The model server did not answer; retry.", 502))
                return
            if response.status >= 500:
                replica.failures.add(time.monotonic())  # lowest_failure weighs it
            await relay(response, send, log, "replica", replica.copy_id, receive)
        finally:
            replica.in_flight -= 1

    async def _wake_and_wait(self, model: str, session: str | None, deadline_s: float
                             ) -> tuple[Pool, routing.Replica] | None:
        pools = [p for p in self.pools.values() if p.model_id == model]
        if not pools:
            return None
        self.held += 1
        try:
            return await self._wait_for_copy(model, session, pools, time.monotonic() + deadline_s)
        finally:
            self.held -= 1

    async def _wait_for_copy(self, model: str, session: str | None, pools: list[Pool], deadline: float
                             ) -> tuple[Pool, routing.Replica] | None:
        last_wake = 0.0
        while time.monotonic() < deadline:
            with contextlib.suppress(BerthError):
                await self.refresh(older_than_s=WAKE_REFRESH_S)
            if time.monotonic() - last_wake > 5:
                last_wake = time.monotonic()
                for pool in pools:
                    with contextlib.suppress(BerthError):
                        await self.api.wake_endpoint(pool.endpoint_id, f"gateway request for {model}")
                        self.metrics.woke(model)
            changed = self.discovery.changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=min(1.0, max(0.05, deadline - time.monotonic())))
            choice = self.pick(model, session)
            if choice is not None:
                return choice
        return None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._tasks.append(asyncio.create_task(self.discovery.refresh_forever(self.refresh_s)))
                self._scraper.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for task in self._tasks:
                    task.cancel()
                await self._scraper.aclose()
                await self.upstream.aclose()
                await self.api.aclose()
                if self.discovery.keys_api is not self.api:
                    await self.discovery.keys_api.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _error(message: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


async def _json(send: Send, status: int, data: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(data).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def run_gateway(api_url: str, token: str, host: str, port: int, keys_token: str | None = None,
                routing_policy: str | None = None, refresh_s: float = 2.0, master_key: str | None = None,
                endpoint_id: str | None = None) -> None:
    """`master_key` (with the gateway's own `endpoint_id`, the audience of its callers' assertions)
    turns on LiteLLM's key contract; the catalog entry always passes both."""
    import uvicorn

    from berth.settled_server import serve

    configure_logging("gateway")  # BERTH_LOG_FORMAT; httpx's line per poll and scrape quietened
    setup_tracing("berth-gateway")  # BERTH_OTEL_ENDPOINT; off: no spans, x-request-id still
    keys_api = ApiClient(api_url, keys_token) if keys_token else None
    api = ApiClient(api_url, token)
    gate = MasterKeyGate(master_key, endpoint_id or "", api.jwks) if master_key else None
    gateway = ModelGateway(api, keys_api=keys_api, refresh_s=refresh_s, routing_policy=routing_policy, gate=gate,
                           limits=ProxyLimits.from_env(body_limit_bytes=limit_policy().body_limit_bytes),
                           metrics=ProxyMetrics(enabled=metrics_enabled(), prefix="berth_model_gateway",
                                                subject="model"))
    serve(uvicorn.Config(traced(gateway, ProxyTracing(service="gateway"), "gateway"), host=host, port=port,
                         log_level="warning", access_log=False, loop="uvloop",
                         http=guarded_protocol(ConnectionLimits.from_env()), lifespan="on",
                         interface="asgi3"))  # said, not guessed: compiled, `traced` would look like ASGI 2
