"""Routing policies: choose one replica of a pool from its vLLM /metrics, with a freshness rule and
session affinity; shared by the endpoint proxy, the model gateway and LiteLLM's custom strategy. The queue, TTFT
and KV policies are here; the capacity ones (gateway/edge/capacity_policies.py), prefix_affinity
(gateway/edge/prefix_affinity.py) and site_local (gateway/edge/site_local.py) in their own modules; POLICIES
registers them all by name."""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Callable, Sequence

# The freshness window is the ground floor's (the control plane's routing explanation judges by it too); the
# routers import it from here as they always did.
from berth.routing_rules import FRESH_FOR_S as FRESH_FOR_S
from gateway.edge.capacity_policies import (
    CostOptimized,
    EnergyOptimized,
    HighestThroughput,
    LowestFailure,
    WeightedCapacity,
)
from gateway.edge.policy_kit import Policy as Policy
from gateway.edge.policy_kit import Ranked, Rotation, tied
from gateway.edge.prefix_affinity import PrefixAffinity
from gateway.edge.prompt_key import PromptKey as PromptKey
from gateway.edge.replica import Replica as Replica
from gateway.edge.replica import ReplicaMetrics as ReplicaMetrics
from gateway.edge.site_local import SiteLocal

log = logging.getLogger("berth.routing")


def eligible(replicas: Sequence[Replica], now: float, fresh_for_s: float = FRESH_FOR_S) -> list[Replica]:
    """Ready, not draining, and scraped successfully within the freshness window."""
    return [r for r in replicas if r.ready and not r.draining and r.metrics.fresh(now, fresh_for_s)]


class RoundRobin:
    """Each eligible replica in turn; ignores the metrics."""

    name = "round_robin"
    reads_prompt = False

    def __init__(self) -> None:
        self._counter = itertools.count()

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        return candidates[next(self._counter) % len(candidates)]

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return [self.choose(candidates)]  # each in turn, whatever the prompt


class LeastQueue:
    """Fewest waiting + running requests (scraped), plus what this router has in flight there."""

    name = "least_queue"
    reads_prompt = False

    def __init__(self) -> None:
        self._rotation = Rotation()

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        # Rotate the start so equal queues share the load instead of piling on the first replica.
        return min(self._rotation.rotated(candidates), key=lambda r: r.queue)

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return tied(candidates, lambda r: r.queue)


class LowestTtft(Ranked):
    """Lowest recent time to first token; replicas not yet measured count as the best seen, ties go to
    the shorter queue."""

    name = "lowest_ttft"

    def rank(self, candidates: Sequence[Replica]) -> Callable[[Replica], tuple[float, float]]:
        known = [r.metrics.recent_ttft_s for r in candidates if r.metrics.recent_ttft_s is not None]
        best = min(known, default=0.0)
        return lambda r: (r.metrics.recent_ttft_s if r.metrics.recent_ttft_s is not None else best, r.queue)


class MostFreeKv:
    """Most free KV cache (1 − vllm:kv_cache_usage_perc); ties go to the shorter queue."""

    name = "most_free_kv"
    reads_prompt = False

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        # The usage is up to one scrape old: compared exactly, the copy that looked emptiest takes every
        # request until the next scrape (measured: p99 3× round_robin's at light load). In 10 % steps,
        # near-equal copies tie and the live queue (with this router's in-flight requests) decides.
        return min(candidates, key=self._rank)

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return tied(candidates, self._rank)

    @staticmethod
    def _rank(replica: Replica) -> tuple[int, float]:
        return round(replica.metrics.kv_cache_usage * 10), replica.queue


class MostFreeVram(MostFreeKv):
    """most_free_kv under the name the control-plane design uses. The same figure, not a second one: vLLM allocates
    its whole GPU memory share (gpu_memory_utilization) at start, so the VRAM that is free for one more request is
    the KV cache's free part, which vllm:kv_cache_usage_perc measures."""

    name = "most_free_vram"


def _prefix_affinity() -> PrefixAffinity:
    return PrefixAffinity(LeastQueue())


POLICIES: dict[str, Callable[[], Policy]] = {
    "cost_optimized": CostOptimized, "energy_optimized": EnergyOptimized,
    "highest_throughput": HighestThroughput, "least_queue": LeastQueue, "lowest_failure": LowestFailure,
    "lowest_ttft": LowestTtft, "most_free_kv": MostFreeKv, "most_free_vram": MostFreeVram,
    "prefix_affinity": _prefix_affinity, "round_robin": RoundRobin, "site_local": SiteLocal,
    "weighted_capacity": WeightedCapacity,
}
DEFAULT_POLICY = "least_queue"


def make(name: str) -> Policy:
    """A fresh policy by name; ValueError names the valid ones."""
    try:
        return POLICIES[name]()
    except KeyError:
        valid = ", ".join(sorted(POLICIES))
        raise ValueError(f"Unknown routing policy '{name}'; choose one of: {valid}") from None


def make_or_default(name: str) -> Policy:
    """Like make, but a router keeps serving on an unknown name: it warns and uses the default."""
    try:
        return make(name or DEFAULT_POLICY)
    except ValueError as error:
        log.warning("%s; using %s", error, DEFAULT_POLICY)
        return make(DEFAULT_POLICY)


def affinity(candidates: Sequence[Replica], session_id: str) -> Replica:
    """Rendezvous hashing: a session keeps its replica while it stays eligible, and only the sessions of
    a replica that leaves move when the pool changes."""
    def weight(replica: Replica) -> bytes:
        return hashlib.blake2b(f"{session_id}\0{replica.copy_id}".encode(), digest_size=8).digest()

    return max(candidates, key=weight)


def choose(policy: Policy, replicas: Sequence[Replica], now: float, session_id: str | None = None,
           exclude: frozenset[str] = frozenset(), fresh_for_s: float = FRESH_FOR_S) -> Replica | None:
    """The replica a request goes to, or None when no replica is eligible."""
    candidates = [r for r in eligible(replicas, now, fresh_for_s) if r.copy_id not in exclude]
    if isinstance(policy, SiteLocal):  # outside its sites before anything, sessions included: never
        candidates = policy.within(candidates)
    if not candidates:
        return None
    if isinstance(session_id, PromptKey):
        if session_id.blocks and isinstance(policy, PrefixAffinity):
            return policy.route(candidates, session_id.blocks)
        return affinity(policy.best(candidates), session_id)
    if session_id:
        return affinity(candidates, session_id)
    return policy.choose(candidates)
