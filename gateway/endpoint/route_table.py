"""The endpoint proxy's routing table: one Route per endpoint, as `/v1/internal/routes` lists it — who may
call it, its service and its pool — and which copy a request goes to."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from berth.contracts import LimitPolicy, RouteCopy, RouteEntry
from berth.kinds import REGISTRY, ProcessKind
from berth.scopes import Scope, in_scope
from berth.security import Identity
from gateway.edge import routing
from gateway.edge.routing import Replica
from gateway.endpoint.traffic_split import TrafficSplit, refreshed


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
    service: str = ProcessKind.VLLM.value
    litellm_routed: frozenset[str] | None = None  # copies LiteLLM routes to; None: not reported yet
    limits: LimitPolicy | None = None  # the endpoint's override of the cluster's limits (gateway/endpoint/limits.py)
    max_context: int | None = None  # the copies' MaxContextSize (the limits' context check); None: not known
    traffic: TrafficSplit | None = None  # a rollout's split by revision; None: every copy alike
    # Ids of the endpoint's tokens revoked before they expire: a valid signature is not enough for these.
    revoked_tokens: frozenset[str] = frozenset()
    # A front that stands in front of the pool (berth/kinds.py: LiteLLM): never routed around. A kind this
    # proxy does not know (a newer control plane) is taken as one: closed.
    fronts_pool: bool = field(init=False, default=True)

    def __post_init__(self) -> None:
        try:
            kind = REGISTRY.get(ProcessKind(self.service))
        except ValueError:  # not a ProcessKind at all
            kind = None
        self.fronts_pool = kind.fronts_pool if kind is not None else True

    def target(self, session_id: str | None = None, exclude: frozenset[str] = frozenset()) -> Replica | None:
        """The service, or the replica the endpoint's routing policy picks among the eligible ones."""
        if self.service_url:
            return Replica(copy_id="service", url=self.service_url) if self._any_ready() else None
        if self.fronts_pool:
            return None  # a pool behind LiteLLM is never reached around it (its key would be bypassed)
        if self.pool:
            now = time.monotonic()
            if self.traffic is not None:
                chosen = routing.choose(self.policy, self.traffic.candidates(self.pool, now, exclude), now,
                                        session_id, exclude)
                if chosen is not None:
                    return chosen
            return routing.choose(self.policy, self.pool, now, session_id, exclude)
        if not self.replicas:  # a control plane that lists no pool details: plain round robin
            return None
        url = self.replicas[next(self.counter) % len(self.replicas)]
        return Replica(copy_id=url, url=url)

    def ready_copies(self) -> frozenset[str]:
        return frozenset(r.copy_id for r in self.pool if r.ready and not r.draining)

    def routable(self) -> frozenset[str] | None:
        """The ready copies LiteLLM routes to (None: LiteLLM has not said which)."""
        if self.litellm_routed is None:
            return None
        return self.ready_copies() & self.litellm_routed

    def serving(self) -> bool:
        return self.wakeable and self._any_ready()

    def _any_ready(self) -> bool:
        """A service in front of a pool (LiteLLM) is worth calling only once the pool has a ready copy;
        until then the request is held and the pool woken, as for a pool without a service."""
        if not self.wakeable:
            return True
        if self.fronts_pool and self.litellm_routed is not None:
            return any(r.ready and not r.draining and r.copy_id in self.litellm_routed for r in self.pool)
        return any(r.ready and not r.draining for r in self.pool)  # a pool at zero has none: hold

    def admits(self, who: Identity) -> bool:
        return in_scope(self.scope, self.owner, self.org, self.groups, who)


def build_route(item: RouteEntry, old: Route | None, known: dict[str, Replica],
                previous: dict[str, Replica]) -> Route:
    """The Route for one `/v1/internal/routes` entry. What routing learnt stays across refreshes: the
    round-robin counter, the policy's state (while the policy is the same) and each copy's Replica (its
    in-flight count and scraped load), collected in `known` by copy id."""
    pool = [_replica(entry, known, previous) for entry in item.pool]
    policy_name = item.routing_policy or routing.DEFAULT_POLICY
    keep_policy = old is not None and old.policy.name == policy_name
    return Route(
        id=item.id, scope=Scope(item.scope), owner=item.owner, org=item.org,
        groups=frozenset(item.groups), service_url=item.service_url,
        replicas=list(item.copy_urls),
        counter=old.counter if old else itertools.count(),
        workflow_id=item.workflow_id, pool=pool,
        policy=old.policy if old is not None and keep_policy else routing.make_or_default(policy_name),
        wakeable=item.wakeable,
        service=item.service or ProcessKind.VLLM.value,
        litellm_routed=None if item.litellm_routed is None else frozenset(item.litellm_routed),
        # The same object while the override is unchanged: the limiter keeps its plan per override object.
        limits=old.limits if old is not None and _same_limits(old.limits, item.limits) else item.limits,
        max_context=item.max_context,
        traffic=refreshed(old.traffic if old is not None else None, item.traffic),
        revoked_tokens=frozenset(item.revoked_tokens or ()),
    )


def _same_limits(old: LimitPolicy | None, new: LimitPolicy | None) -> bool:
    """Whether two overrides set the same limits: `==` alone would take an explicit null (off) for unset."""
    if old is None or new is None:
        return old is new
    return old.model_dump(exclude_unset=True) == new.model_dump(exclude_unset=True)


def _replica(entry: RouteCopy, known: dict[str, Replica], previous: dict[str, Replica]) -> Replica:
    replica = previous.get(entry.copy_id)
    if replica is None or replica.url != entry.url:
        replica = Replica(copy_id=entry.copy_id, url=entry.url)
    replica.ready, replica.draining = entry.ready, entry.draining
    replica.api_key = entry.api_key
    replica.revision = entry.revision
    replica.node_power_w = entry.power_w
    replica.site, replica.site_rank = entry.site, entry.site_rank
    known[replica.copy_id] = replica
    return replica
