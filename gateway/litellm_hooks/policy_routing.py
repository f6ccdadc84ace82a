"""PolicyRouting: LiteLLM's custom routing strategy that picks a replica with Berth's routing policies."""

# Runs inside the LiteLLM proxy process, like gateway.litellm_hooks.replica_sync (which creates it, feeds it the
# pool's replicas and policy, and installs it on the router). It reuses gateway.edge.routing's policies
# and gateway.edge.metrics' scraper as they are: they need only the stdlib and httpx, which that venv has.
#
# LiteLLM 1.108.7: `Router.set_custom_routing_strategy(strategy)` sets the strategy's bound
# `async_get_available_deployment` / `get_available_deployment` as attributes of the router instance;
# the proxy's calls await the async one with keyword arguments (model, messages, input,
# specific_deployment, request_kwargs) and use the deployment dict it returns. A `None` is not a
# fallback there (the caller indexes it), so LiteLLM's own selection is reached through the class.
# PolicyRouting has the shape of litellm's CustomRoutingStrategyBase without inheriting it (that base
# holds only those two signatures, and LiteLLM checks no type): so this module imports no litellm and
# its tests run in Berth's own virtualenv, against a stand-in router.

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import httpx

from gateway.edge import prompt_key, routing
from gateway.edge.metrics import MetricsScraper
from gateway.edge.routing import Replica

if TYPE_CHECKING:
    from litellm.router import Router

SESSION_HEADER: Final = "x-session-id"
# A call whose end LiteLLM never reports (a lost callback) stops counting as in flight after this long:
# the proxy's own request timeout.
CALL_FORGOTTEN_AFTER_S: Final = 600.0
# Where the proxy puts the request's headers: for its logging, and in the metadata for guardrails
# (named litellm_metadata on some routes).
HEADER_CARRIERS: Final = ("proxy_server_request", "metadata", "litellm_metadata")

logger: Final = logging.getLogger("LiteLLM Proxy").getChild("berth_routing")
logger.setLevel(logging.INFO)


def deployments_for(router: Router, model_name: str) -> list[dict[str, Any]]:
    """The router's deployments of the model (gateway.litellm_hooks.replica_sync keeps them equal to the ready
    replicas)."""
    return [entry for entry in list(router.model_list) if entry.get("model_name") == model_name]


def api_base_of(deployment: Mapping[str, Any]) -> str | None:
    api_base: Final = (deployment.get("litellm_params") or {}).get("api_base")
    return api_base if isinstance(api_base, str) else None


def session_id(request_kwargs: Mapping[str, Any] | None) -> str | None:
    """The caller's x-session-id, from the request headers the proxy passes along with the call."""
    for carrier in HEADER_CARRIERS:
        holder = (request_kwargs or {}).get(carrier)
        headers = holder.get("headers") if isinstance(holder, Mapping) else None
        if not isinstance(headers, Mapping):
            continue
        for name, value in headers.items():
            if isinstance(name, str) and name.lower() == SESSION_HEADER and str(value).strip():
                return str(value).strip()
    return None


class PolicyRouting:
    """Chooses among the model's deployments with the endpoint's routing policy, on scraped vLLM metrics."""

    def __init__(self, model_name: str, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.model_name: Final = model_name
        self.policy: routing.Policy = routing.make(routing.DEFAULT_POLICY)
        self._asked_policy = routing.DEFAULT_POLICY
        # api_base (http://host:port/v1, as the deployments carry it) -> the replica and its figures.
        self.replicas: dict[str, Replica] = {}
        self.scraper: Final = MetricsScraper(self._scrape_targets, transport=transport)
        self._router: Router | None = None
        # litellm_call_id -> the replica it went to and when: the in-flight count is given back when
        # LiteLLM reports the call's end (gateway.litellm_hooks.replica_sync's CallEnds), by id, so a report counts
        # once.
        self._calls: dict[str, tuple[Replica, float]] = {}

    def _scrape_targets(self) -> list[Replica]:
        return list(self.replicas.values())

    def set_policy(self, name: str) -> None:
        # Compared with the name last asked for (an empty or unknown one resolves to the default, whose
        # name differs): keeps the policy's own state (round robin's position) and logs once.
        if name == self._asked_policy:
            return
        self._asked_policy = name
        self.policy = routing.make_or_default(name)
        logger.info("berth routing: %s routes by %s", self.model_name, self.policy.name)

    async def follow(self, ready: Mapping[str, str], keys: Mapping[str, str],
                     site_ranks: Mapping[str, int | None] | None = None) -> None:
        """Track the ready replicas (id -> api_base, id -> the copy's key, which its /metrics wants, id -> how
        site_local ranks it); a new one is scraped before LiteLLM may route to it."""
        followed: Final[dict[str, Replica]] = {}
        for replica_id, api_base in ready.items():
            known = self.replicas.get(api_base)
            if known is None or known.copy_id != replica_id:
                known = Replica(copy_id=replica_id, url=api_base.rstrip("/").removesuffix("/v1"))
            known.api_key = keys.get(replica_id, "")
            known.site_rank = (site_ranks or {}).get(replica_id, 0)
            followed[api_base] = known
        # Only never-tried replicas: one whose scrapes keep failing must not stall every tick on a timeout.
        new: Final = [replica for replica in followed.values()
                      if replica.metrics.scraped_at is None and replica.metrics.failed_at is None]
        self.replicas = followed
        forgotten: Final = time.monotonic() - CALL_FORGOTTEN_AFTER_S
        for call_id in [call_id for call_id, (_, sent_at) in self._calls.items() if sent_at < forgotten]:
            self.finished(call_id)
        await asyncio.gather(*(self.scraper.scrape_now(replica) for replica in new))

    def queues(self) -> dict[str, float]:
        """Replica id -> its queue as the policy weighs it (last scrape's running + waiting, plus the calls
        this worker has in flight), for the replicas scraped at least once: shows what routing has read."""
        return {replica.copy_id: replica.queue for replica in list(self.replicas.values())
                if replica.metrics.scraped_at is not None}

    def install(self, router: Router) -> None:
        """Route `router`'s calls through this strategy; again after LiteLLM rebuilt or reset its router."""
        self._router = router
        if router.__dict__.get("async_get_available_deployment") != self.async_get_available_deployment:
            router.set_custom_routing_strategy(self)
            logger.info("berth routing: installed on LiteLLM's router (%s)", self.policy.name)

    def pick(self, deployments: Sequence[Mapping[str, Any]],
             request_kwargs: Mapping[str, Any] | None, messages: Any = None) -> Mapping[str, Any] | None:
        """The deployment of the replica the policy chooses, or None when no replica is eligible. `messages`: the
        chat's, which a policy that reads the prompt (prefix_affinity) routes by when no x-session-id is sent."""
        by_replica: Final = {
            replica.copy_id: deployment
            for deployment in deployments
            if (replica := self.replicas.get(api_base_of(deployment) or "")) is not None
        }
        candidates: Final = [replica for replica in self.replicas.values() if replica.copy_id in by_replica]
        now: Final = time.monotonic()
        session = session_id(request_kwargs)
        if session is None and self.policy.reads_prompt and len(candidates) > 1:
            session = prompt_key.of_prompt({"messages": messages}, with_blocks=True)
        chosen: Final = routing.choose(self.policy, candidates, now, session)
        if chosen is None:
            return None
        # Counted until the call ends: between two scrapes (2 s) a burst must not pile onto the replica
        # that looked emptiest. A call without an id could never be given back, so it is not counted.
        call_id: Final = (request_kwargs or {}).get("litellm_call_id")
        if isinstance(call_id, str):
            self.finished(call_id)  # the same call routed again (a retry): counted once
            chosen.in_flight += 1
            self._calls[call_id] = (chosen, now)
        return by_replica[chosen.copy_id]

    def finished(self, call_id: str | None, failed: bool = False) -> None:
        """A routed call ended (answered, failed or abandoned): its replica has one less in flight, and one more
        recent failure when LiteLLM reports the call failed (lowest_failure weighs them)."""
        ended: Final = self._calls.pop(call_id, None) if call_id else None
        if ended is not None:
            ended[0].in_flight -= 1
            if failed:
                ended[0].failures.add(time.monotonic())

    @property
    def router(self) -> Router:
        if self._router is None:
            raise RuntimeError("PolicyRouting is called before install()")
        return self._router

    def _policy_pick(self, model: str, call: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if model != self.model_name or call.get("specific_deployment"):
            return None
        return self.pick(deployments_for(self.router, model), call.get("request_kwargs"), call.get("messages"))

    # LiteLLM passes everything but the model by keyword (messages, input, specific_deployment,
    # request_kwargs); it all goes on unchanged to LiteLLM's own selection.
    async def async_get_available_deployment(self, model: str, **call: Any) -> Mapping[str, Any] | None:
        picked: Final = self._policy_pick(model, call)
        if picked is not None:
            return picked
        # Not this model, a pinned deployment, or no replica with fresh figures (all scrapes failing):
        # LiteLLM's own choice among its deployments beats refusing the request.
        router: Final = self.router
        return await type(router).async_get_available_deployment(router, model=model, **call)

    def get_available_deployment(self, model: str, **call: Any) -> Mapping[str, Any] | None:
        picked: Final = self._policy_pick(model, call)
        if picked is not None:
            return picked
        router: Final = self.router
        return type(router).get_available_deployment(router, model=model, **call)

    async def aclose(self) -> None:
        await self.scraper.aclose()
