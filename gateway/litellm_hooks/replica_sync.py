"""Replica sync: keep LiteLLM's router equal to the pool's ready copies, routed by the pool's policy;
count requests for autoscaling."""

# Runs inside the LiteLLM proxy process (the .venv-litellm interpreter): it may import only what
# that venv has — litellm, fastapi/starlette, httpx, pydantic, the stdlib — and berth.contracts
# (pydantic only), whose ServiceCopies is the model the API's replica route declares.
#
# Wiring (rendered by activities.litellm_service):
#   LITELLM_WORKER_STARTUP_HOOKS=gateway.litellm_hooks.replica_sync:start.
# LiteLLM 1.108.7 imports the module and awaits `start()` in every worker's lifespan start-up
# (litellm/proxy/proxy_server.py, proxy_startup_event, "RUN WORKER STARTUP HOOKS"), BEFORE it loads
# the config: `proxy_server.llm_router` does not exist yet when `start()` runs, so the sync loop
# looks it up afresh on every tick.
# Each tick also (re)installs gateway.litellm_hooks.policy_routing's strategy on the router, with the policy the
# replica list names, and its scraper reads the copies' vLLM /metrics from this process.
#
# Environment:
#   BERTH_MODEL_NAME         model id clients ask for and /v1/models lists, e.g. openai/gpt-oss-20b
#   BERTH_REPLICAS_URL       GET -> {"copies": [{"copy_id": "...", "url": "http://host:port/v1", "ready": true,
#                                                 "api_key": "<the copy's vLLM key>"}],
#                                   "routing_policy": "least_queue"}  (a policy of gateway.edge.routing)
#   BERTH_SERVED_MODEL_NAME  name the copies serve the model under (default: BERTH_MODEL_NAME)
#   BERTH_SYNC_INTERVAL_S    poll interval (default 1.0)
#   BERTH_RATE_URL           optional: POST the request counters there every interval
#   BERTH_REPLICAS_TOKEN     optional: bearer token for BERTH_REPLICAS_URL (a narrow endpoint-service token)
#
# Request counters: GET /berth/requests (master key) answers this worker's RequestSnapshot as JSON.

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

import httpx
import litellm
from fastapi import Depends, FastAPI
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy.auth.user_api_key_auth import user_api_key_auth
from litellm.router import Router
from litellm.types.router import Deployment, LiteLLM_Params, ModelInfo
from pydantic import ValidationError

from berth.contracts import ServiceCopies
from berth.settings import litellm_hook_settings
from gateway.litellm_hooks import gc_pacing, request_path
from gateway.litellm_hooks.api_tls import api_ssl_context
from gateway.litellm_hooks.auth import warm_up
from gateway.litellm_hooks.policy_routing import PolicyRouting, deployments_for

# vLLM speaks the OpenAI API; LiteLLM's hosted_vllm provider adds vLLM's own parameters
# (reasoning_effort, tool schemas without `strict`) on top of the OpenAI transformation.
PROVIDER_PREFIX: Final = "hosted_vllm/"
DEPLOYMENT_ID_PREFIX: Final = "berth-replica-"
# Each copy wants its own vLLM key (the replica list carries it); LiteLLM wants one even where none is.
UPSTREAM_API_KEY: Final = "none"
REPLICAS_TIMEOUT_S: Final = 2.0
ROUTER_WAIT_S: Final = 0.1
RATE_WINDOW_S: Final = 60
REQUESTS_ROUTE: Final = "/berth/requests"
EMPTY_POLL_SPEEDUP: Final = 4
_STATE_KEY: Final = "berth_replica_sync"

# A child of LiteLLM's proxy logger, so its lines reach LiteLLM's handler and format; INFO because
# replica changes are what an operator reads the log for, while LiteLLM's own logger stays at WARNING.
logger: Final = logging.getLogger("LiteLLM Proxy").getChild("berth_sync")
logger.setLevel(logging.INFO)


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """What the sync loop needs, read once from the environment."""

    model_name: str
    served_model_name: str
    replicas_url: str
    interval_s: float
    rate_url: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> SyncSettings:
        hook: Final = litellm_hook_settings(environ)
        return cls(model_name=hook.model_name, served_model_name=hook.served_model_name,
                   replicas_url=hook.replicas_url, interval_s=hook.interval_s, rate_url=hook.rate_url)


@dataclass(frozen=True, slots=True)
class RequestSnapshot:
    """This worker's request counters; a reader sums workers and derives a rate from two snapshots."""

    model: str
    pid: int
    started_at: float
    requests_total: int  # inference requests admitted by auth since the worker started
    # Of those, the ones that arrived while no replica was ready: the demand that must wake a pool at zero.
    requests_without_replica_total: int
    requests_last_60s: int
    copies: tuple[str, ...]  # ids of the copies the router sends this model's requests to, now
    replicas: tuple[str, ...]  # the old name of `copies` (deprecated; kept for one release)


class RequestCounter(CustomLogger):
    """Counts admitted inference requests through LiteLLM's proxy pre-call hook."""

    def __init__(self, model_name: str) -> None:
        super().__init__()
        self.model_name: Final = model_name
        self.started_at: Final = time.time()
        self.requests_total = 0
        self.requests_without_replica_total = 0
        self.copies: tuple[str, ...] = ()
        # Requests per whole second over the last RATE_WINDOW_S seconds: bounded memory at any rate.
        self._per_second: dict[int, int] = {}

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> None:
        # Called once per chat/completions/embeddings request after auth and before routing, so
        # requests that fail for lack of a replica are counted too: that demand must wake the pool.
        self.requests_total += 1
        if not self.copies:
            self.requests_without_replica_total += 1
        second: Final = int(time.time())
        self._per_second[second] = self._per_second.get(second, 0) + 1
        if len(self._per_second) > RATE_WINDOW_S:
            self._forget_before(second - RATE_WINDOW_S)
        return None

    def _forget_before(self, second: int) -> None:
        for stale in [bucket for bucket in self._per_second if bucket <= second]:
            del self._per_second[stale]

    def snapshot(self) -> RequestSnapshot:
        now: Final = int(time.time())
        self._forget_before(now - RATE_WINDOW_S)
        return RequestSnapshot(
            model=self.model_name,
            pid=os.getpid(),
            started_at=self.started_at,
            requests_total=self.requests_total,
            requests_without_replica_total=self.requests_without_replica_total,
            requests_last_60s=sum(self._per_second.values()),
            copies=self.copies,
            replicas=self.copies,
        )


class CallEnds(CustomLogger):
    """Tells the routing strategy that a call it routed has ended, so its in-flight counts stay true."""

    def __init__(self, routing: PolicyRouting) -> None:
        super().__init__()
        self.routing: Final = routing

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        # For a stream: once it has ended, not at its first chunk.
        self.routing.finished(kwargs.get("litellm_call_id"))

    async def async_log_failure_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self.routing.finished(kwargs.get("litellm_call_id"), failed=True)


def deployment_id(replica_id: str) -> str:
    return f"{DEPLOYMENT_ID_PREFIX}{replica_id}"


def current_deployments(router: Router, model_name: str) -> dict[str, str | None]:
    """Deployment id -> api_base of every deployment the router holds for the model."""
    found: Final[dict[str, str | None]] = {}
    for entry in deployments_for(router, model_name):
        model_info: Mapping[str, Any] = entry.get("model_info") or {}
        litellm_params: Mapping[str, Any] = entry.get("litellm_params") or {}
        identifier = model_info.get("id")
        if isinstance(identifier, str):
            found[identifier] = litellm_params.get("api_base")
    return found


def apply_replicas(router: Router, settings: SyncSettings, ready: Mapping[str, str],
                   keys: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Make the model's deployments equal `ready` (replica id -> url), each calling its copy with the
    copy's key from `keys` (replica id -> key; a key never changes for a copy id); return (added, removed)."""
    desired: Final = {deployment_id(replica_id): url for replica_id, url in ready.items()}
    current: Final = current_deployments(router, settings.model_name)
    removed = 0
    added = 0
    # Every deployment of the model is ours to manage, including any a config file declared.
    for identifier, api_base in current.items():
        if desired.get(identifier) != api_base:
            router.delete_deployment(id=identifier)
            removed += 1
    for identifier, url in desired.items():
        if current.get(identifier) == url:
            continue
        replica_id = identifier.removeprefix(DEPLOYMENT_ID_PREFIX)
        router.add_deployment(
            Deployment(
                model_name=settings.model_name,
                litellm_params=LiteLLM_Params(
                    model=f"{PROVIDER_PREFIX}{settings.served_model_name}",
                    api_base=url,
                    api_key=(keys or {}).get(replica_id) or UPSTREAM_API_KEY,
                ),
                model_info=ModelInfo(id=identifier),
            )
        )
        added += 1
    return added, removed


class ReplicaSync:
    """Polls the pool's replica list and applies it to the running proxy's router."""

    def __init__(self, settings: SyncSettings, client: httpx.AsyncClient) -> None:
        self.settings: Final = settings
        self.counter: Final = RequestCounter(settings.model_name)
        self.routing: Final = PolicyRouting(settings.model_name)
        self.call_ends: Final = CallEnds(self.routing)
        self._client: Final = client
        self._failing = False

    async def run(self) -> None:
        self.routing.scraper.start()
        try:
            while True:
                router = _router()
                if router is None:
                    await asyncio.sleep(ROUTER_WAIT_S)
                    continue
                try:
                    # A config reload may rebuild litellm.callbacks; the manager skips duplicates.
                    litellm.logging_callback_manager.add_litellm_callback(self.counter)
                    litellm.logging_callback_manager.add_litellm_callback(self.call_ends)
                    await self.tick(router)
                except Exception:
                    # One bad tick (a replica LiteLLM refuses, a router change mid-update) must not end
                    # the loop: then the proxy would silently stop following the pool for good.
                    logger.exception("berth replica sync: tick failed; retrying next interval")
                # No replica routed (a pool at zero or waking): look 4× as often, since a held request
                # waits for LiteLLM to learn of the first copy; with copies, the configured interval.
                await asyncio.sleep(self.settings.interval_s / (1 if self.counter.copies else EMPTY_POLL_SPEEDUP))
        finally:
            await self.routing.aclose()
            await self._client.aclose()

    async def tick(self, router: Router) -> None:
        listing: Final = await self._fetch_replicas()
        if listing is not None:
            ready: Final = {copy.copy_id: copy.url for copy in listing.copies if copy.ready}
            keys: Final = {copy.copy_id: copy.api_key for copy in listing.copies if copy.ready}
            self.routing.set_policy(listing.routing_policy)
            # Scraped before LiteLLM learns of it, so a new replica is eligible from its first request.
            await self.routing.follow(ready, keys, {copy.copy_id: copy.site_rank for copy in listing.copies})
            added, removed = apply_replicas(router, self.settings, ready, keys)
            # Read back from the router, so the counters say what LiteLLM routes to, not what it was told.
            routed: Final = current_deployments(router, self.settings.model_name)
            self.counter.copies = tuple(
                sorted(identifier.removeprefix(DEPLOYMENT_ID_PREFIX) for identifier in routed)
            )
            if added or removed:
                logger.info(
                    "berth replica sync: %s routes to %d replica(s) %s (+%d -%d)",
                    self.settings.model_name,
                    len(self.counter.copies),
                    list(self.counter.copies),
                    added,
                    removed,
                )
        # After any config reload or routing-strategy reset LiteLLM did, not only the first time.
        self.routing.install(router)
        if self.settings.rate_url:
            await self._push_counters()

    async def _fetch_replicas(self) -> ServiceCopies | None:
        """The pool's replica list, or None when it cannot be read."""
        try:
            response: Final = await self._client.get(self.settings.replicas_url)
            response.raise_for_status()
            listing: Final = ServiceCopies.model_validate_json(response.content)
        except (httpx.HTTPError, ValidationError) as error:
            # Keep serving the copies last seen: a control-plane hiccup must not empty the pool.
            if not self._failing:
                logger.warning(
                    "berth replica sync: replica list unreadable (%s); keeping the last one", error
                )
            self._failing = True
            return None
        if self._failing:
            logger.info("berth replica sync: replica list readable again")
        self._failing = False
        return listing

    async def _push_counters(self) -> None:
        try:
            await self._client.post(self.settings.rate_url, json=asdict(self.counter.snapshot()))
        except httpx.HTTPError as error:
            logger.debug("berth replica sync: request counters not pushed: %s", error)


def _router() -> Router | None:
    from litellm.proxy import proxy_server

    router: Router | None = proxy_server.llm_router
    return router


def _add_requests_route(app: FastAPI, sync: ReplicaSync) -> None:
    async def requests_counters() -> dict[str, Any]:
        # Beside the counters (what the rate push sends too), the queues this worker's routing has read.
        return {**asdict(sync.counter.snapshot()), "queues": sync.routing.queues()}

    # LiteLLM's auth (and so gateway.litellm_hooks.auth) guards it: the master key reads it, an assertion
    # caller gets 403.
    app.add_api_route(
        REQUESTS_ROUTE,
        requests_counters,
        methods=["GET"],
        dependencies=[Depends(user_api_key_auth)],
        include_in_schema=False,
    )
    # Pass-through endpoints and lazily attached features can add catch-all routes; first match wins.
    app.router.routes.insert(0, app.router.routes.pop())


async def start() -> None:
    """LITELLM_WORKER_STARTUP_HOOKS entry point: start this worker's replica sync."""
    from litellm.proxy import proxy_server

    # First: from here on, no collection fires inside a ContextVar operation (gateway/litellm_hooks/gc_pacing.py).
    proxy_server.app.state.berth_gc_pacing = gc_pacing.start()
    # Then the per-request work Berth has no use for, set aside before the first request (its module says what).
    proxy_server.app.state.berth_request_path = request_path.start()
    settings: Final = SyncSettings.from_environment(os.environ)
    token: Final = litellm_hook_settings(os.environ).replicas_token
    # The token reads one endpoint's replica list and nothing else; never logged.
    headers: Final = {"Authorization": f"Bearer {token}"} if token else {}
    client: Final = httpx.AsyncClient(
        timeout=httpx.Timeout(REPLICAS_TIMEOUT_S), trust_env=False, headers=headers,
        verify=api_ssl_context(os.environ),
    )
    sync: Final = ReplicaSync(settings, client)
    app: Final[FastAPI] = proxy_server.app
    _add_requests_route(app, sync)
    # The app state holds the task: an unreferenced asyncio task may be garbage-collected mid-run.
    setattr(app.state, _STATE_KEY, (sync, asyncio.create_task(sync.run(), name="berth-replica-sync")))
    logger.info("berth replica sync: following %s for %s", settings.replicas_url, settings.model_name)
    # The assertion keys too, once, in the background: identified callers keep being admitted if the
    # control plane goes away before the first of them arrives.

    app.state.berth_jwks_warm_up = asyncio.create_task(warm_up(app.state), name="berth-jwks-warm-up")
