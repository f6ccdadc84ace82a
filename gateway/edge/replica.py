"""Replica: a routable copy of a pool and what a router knows of its load — its scraped vLLM /metrics
(gateway/edge/metrics.py), this router's in-flight requests and its recent failures. The routing policies
(gateway/edge/routing.py and the modules it registers) read nothing else."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from berth.routing_rules import FRESH_FOR_S, metrics_fresh

# A failed request counts half as much a minute later: long enough that a copy failing every few seconds stays
# behind its healthy peers, short enough that one bad minute does not exile it for the hour.
FAILURE_HALF_LIFE_S = 60.0


@dataclass
class ReplicaMetrics:
    """One replica's load as last scraped from its vLLM /metrics (plus this router's own in-flight count)."""

    running: float = 0.0  # vllm:num_requests_running
    waiting: float = 0.0  # vllm:num_requests_waiting
    kv_cache_usage: float = 0.0  # vllm:kv_cache_usage_perc, 0..1
    ttft_sum: float = 0.0  # vllm:time_to_first_token_seconds_sum (cumulative)
    ttft_count: float = 0.0  # vllm:time_to_first_token_seconds_count (cumulative)
    recent_ttft_s: float | None = None  # mean TTFT of the requests finished between the last two scrapes
    generation_tokens: float = 0.0  # vllm:generation_tokens_total (cumulative)
    # Generation tokens/s per running request over the last scrape interval in which the copy generated: how fast
    # it decodes one sequence. Kept while it idles (an idle copy is not a slow one); None: never measured.
    tokens_per_s: float | None = None
    power_watts: float | None = None  # the GPU's draw, where the copy's /metrics reports one; None: not reported
    scraped_at: float | None = None  # monotonic time of the last successful scrape; None = never
    failed_at: float | None = None  # monotonic time of the last failed scrape or connect failure

    def fresh(self, now: float, fresh_for_s: float = FRESH_FOR_S) -> bool:
        return metrics_fresh(self.scraped_at, self.failed_at, now, fresh_for_s)


@dataclass
class FailedRequests:
    """A copy's failed requests (a 5xx answer, or none), decaying with FAILURE_HALF_LIFE_S: the recent ones count."""

    count: float = 0.0  # as of `at`
    at: float = 0.0  # monotonic

    def add(self, now: float) -> None:
        self.count = self.recent(now) + 1.0
        self.at = now

    def recent(self, now: float) -> float:
        if self.count == 0.0:
            return 0.0
        return self.count * math.pow(0.5, max(0.0, now - self.at) / FAILURE_HALF_LIFE_S)


@dataclass
class Replica:
    """A routable copy of a pool: its address, its state in the store and what we know of its load."""

    copy_id: str
    url: str
    ready: bool = True
    draining: bool = False
    metrics: ReplicaMetrics = field(default_factory=ReplicaMetrics)
    in_flight: int = 0  # requests this router has sent and not yet seen finish
    api_key: str = field(default="", repr=False)  # the copy's vLLM key ("" for a service)
    revision: int = 1  # the workflow revision it serves (gateway/endpoint/traffic_split.py splits by it)
    failures: FailedRequests = field(default_factory=FailedRequests)  # this router's, of the requests it sent
    # How dear the copy's node is to run (lower is cheaper; cost_optimized). 0 for every copy today: a route entry
    # names no node to read a tier from (docs/pools.md).
    cost_tier: int = 0
    # The watts its GPUs drew at their nodes' last NVML reading (the route entry's `power_w`; None: not known):
    # energy_optimized weighs it where the copy's /metrics report no draw.
    node_power_w: float | None = None
    # Its node's site, and how site_local ranks it for its endpoint (the routing table's, berth/sites.py
    # `route_rank`): 0 the preferred site (or no preference), 1 a failover site, None never.
    site: str | None = None
    site_rank: int | None = 0

    def authorization(self) -> list[tuple[bytes, bytes]]:
        """The header a request to this copy carries (vLLM answers 401 on /v1 without it)."""
        return [(b"authorization", b"Bearer " + self.api_key.encode())] if self.api_key else []

    @property
    def queue(self) -> float:
        return self.metrics.waiting + self.metrics.running + self.in_flight
