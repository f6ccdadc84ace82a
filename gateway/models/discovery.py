"""PoolDiscovery: the pools the model gateway serves, as the endpoints API lists them — each discoverable
`Proxy=false` pool's model, routing policy and copies (with the keys vLLM asks for), refreshed on a timer and,
while a request waits on a pool it woke, on demand."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from berth.api_client import ApiClient
from berth.errors import BerthError, PermissionDeniedError
from gateway.edge import routing
from gateway.edge.metrics import MetricsScraper

log = logging.getLogger("berth.gateway")

# While a request waits on a pool it woke, discovery runs this often whatever DiscoveryInterval says:
# a long interval must not outlast the hold deadline (the documents: a woken pool succeeds on retry).
WAKE_REFRESH_S = 2.0


@dataclass
class Pool:
    """One discovered endpoint (a Proxy=false pool) serving a model."""

    endpoint_id: str
    workflow_id: str
    model_id: str
    policy: routing.Policy
    replicas: dict[str, routing.Replica] = field(default_factory=dict)


class PoolDiscovery:
    """The discovered pools by endpoint id, and why the endpoints not discovered are not; `changed` is set
    after each round (a waiting request looks again)."""

    def __init__(self, api: ApiClient, keys_api: ApiClient, routing_policy: str | None,
                 scraper: MetricsScraper) -> None:
        self.api = api
        # Reads the discovered copies' keys (a replica-keys token, or an administrator's).
        self.keys_api = keys_api
        # The catalog entry's RoutingPolicy picks among a model's copies; unset, each pool's own policy.
        self.routing_policy = routing_policy
        self.scraper = scraper  # a copy found is scraped at once: routing reads its queue
        self.pools: dict[str, Pool] = {}
        self.not_discoverable: dict[str, str] = {}
        self._told: set[str] = set()
        self._keys_refused = False
        self.changed = asyncio.Event()
        self._refreshing = asyncio.Lock()  # the poll loop and a waking request never refresh at once
        self._refreshed_at = -WAKE_REFRESH_S
        self.rounds = 0  # completed, since start
        self.last_round_started_at: float | None = None  # wall clock, of the last completed round

    def replicas(self) -> list[routing.Replica]:
        return [r for pool in self.pools.values() for r in pool.replicas.values()]

    async def _replica_keys(self) -> dict[str, str] | None:
        """Each discovered copy's key (vLLM answers 401 without it); none when this gateway may not read
        them, said once: it then runs for a user who holds neither a replica-keys token nor admin rights.
        None when the read failed otherwise: the keys already known stay."""
        try:
            keys = await self.keys_api.replica_keys()
        except PermissionDeniedError:
            if not self._keys_refused:
                self._keys_refused = True
                log.warning("cannot read the copies' keys (BERTH_REPLICA_KEYS_TOKEN unset and BERTH_TOKEN is not "
                            "an administrator's): the copies will refuse these requests; run the gateway as the "
                            "'LiteLLM Model Gateway' catalog entry")
            return {}
        except BerthError as error:
            log.warning("reading the copies' keys failed: %s", error)
            return None
        self._keys_refused = False
        return keys

    async def refresh(self, older_than_s: float = 0.0) -> None:
        """Discover now, unless a discovery finished less than `older_than_s` ago (many waiting requests
        then cost the API one poll, not one each)."""
        async with self._refreshing:
            if time.monotonic() - self._refreshed_at >= older_than_s:
                started_at = time.time()
                await self._refresh()
                self._refreshed_at = time.monotonic()
                self.rounds += 1
                self.last_round_started_at = started_at

    async def _refresh(self) -> None:
        endpoints = await self.api.endpoints()
        keys = await self._replica_keys()
        seen: set[str] = set()
        for endpoint in endpoints:
            notes = endpoint.annotations
            model_id = notes.model_id or endpoint.model_id
            if not model_id:
                continue
            if not notes.discoverable:
                reason = notes.not_discoverable_reason or "it is not annotated for discovery"
                self.not_discoverable[endpoint.id] = f"{model_id} ({endpoint.workflow_id}): {reason}"
                if endpoint.id not in self._told:
                    self._told.add(endpoint.id)
                    log.warning("not serving %s from workflow %s: %s", model_id, endpoint.workflow_id, reason)
                continue
            seen.add(endpoint.id)
            pool = self.pools.get(endpoint.id)
            if pool is None:
                pool = Pool(endpoint_id=endpoint.id, workflow_id=endpoint.workflow_id, model_id=model_id,
                            policy=routing.make(self.routing_policy or notes.routing_policy or "least_queue"))
                self.pools[endpoint.id] = pool
                log.info("discovered %s at endpoint %s", model_id, endpoint.id)
            current = {r.copy_id: r for r in endpoint.replicas}
            for copy_id in list(pool.replicas):
                if copy_id not in current:
                    del pool.replicas[copy_id]
            for copy_id, item in current.items():
                replica = pool.replicas.get(copy_id)
                fresh = replica is None
                if replica is None:
                    replica = routing.Replica(copy_id=copy_id, url=item.url)
                    pool.replicas[copy_id] = replica
                replica.ready, replica.draining = item.ready, item.draining
                if keys is not None:
                    replica.api_key = keys.get(copy_id, "")
                if fresh:  # with its key: the copy's /metrics answers only Berth
                    await self.scraper.scrape_now(replica)
        for endpoint_id in list(self.pools):
            if endpoint_id not in seen:
                log.info("dropped %s (endpoint %s is gone or out of reach)", self.pools[endpoint_id].model_id,
                         endpoint_id)
                del self.pools[endpoint_id]
        self.changed.set()
        self.changed = asyncio.Event()

    async def refresh_forever(self, every_s: float) -> None:
        while True:
            try:
                await self.refresh()
            except BerthError as error:
                log.warning("discovery failed: %s", error)
            await asyncio.sleep(every_s)

