"""The routing policies that weigh a copy's capacity rather than its queue alone (issue 36): weighted_capacity,
highest_throughput, lowest_failure, cost_optimized and energy_optimized. Each chooses among the candidates
`routing.choose` gives it — ready, not draining, and scraped within 30 s with no failure since — so a copy whose
figures are stale or whose scrape failed is never weighed here at all, let alone as idle."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gateway.edge.policy_kit import Ranked, Rotation, tied, within_load
from gateway.edge.replica import Replica

POWER_STEP_W = 50.0  # energy_optimized compares draws in these steps: a few watts' noise must not decide
KV_STEPS = 10  # cache usage compared in 10 % steps, as most_free_kv does (routing.MostFreeKv: why)


def capacity_weight(replica: Replica) -> float:
    """Free KV cache share over the queue it would join: (1 − usage) / (1 + queue)."""
    return max(0.0, 1.0 - replica.metrics.kv_cache_usage) / (1.0 + replica.queue)


class WeightedCapacity:
    """Every copy in proportion to its free capacity (`capacity_weight`), by smooth weighted round robin (nginx's):
    deterministic, and a copy with twice the weight gets twice the requests, interleaved rather than in runs. The
    weights are taken afresh at each request, so this router's own in-flight requests count at once."""

    name = "weighted_capacity"
    reads_prompt = False

    def __init__(self) -> None:
        self._current: dict[str, float] = {}  # copy id -> its running credit (only the candidates' are kept)

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        weights = {r.copy_id: capacity_weight(r) for r in candidates}
        total = sum(weights.values())
        if total <= 0.0:  # every cache full: the shortest queue
            return min(candidates, key=lambda r: r.queue)
        current = {copy_id: self._current.get(copy_id, 0.0) + weight for copy_id, weight in weights.items()}
        chosen = max(candidates, key=lambda r: current[r.copy_id])
        current[chosen.copy_id] -= total
        self._current = current
        return chosen

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return [self.choose(candidates)]  # its turn, whatever the prompt (as round_robin)


class HighestThroughput(Ranked):
    """The copy that would generate fastest for one more request: its measured tokens/s per running request over
    the queue it would join. A copy not measured yet counts as the fastest seen (as lowest_ttft treats TTFT)."""

    name = "highest_throughput"

    def rank(self, candidates: Sequence[Replica]) -> Callable[[Replica], tuple[float, float]]:
        known = [r.metrics.tokens_per_s for r in candidates if r.metrics.tokens_per_s is not None]
        fastest = max(known, default=1.0)

        def rank(replica: Replica) -> tuple[float, float]:
            speed = replica.metrics.tokens_per_s
            return -(fastest if speed is None else speed) / (1.0 + replica.queue), replica.queue
        return rank


class LowestFailure:
    """The fewest recent failed requests (a 5xx answer or none; halving every minute, Replica.failures), counted
    in whole requests so that an old failure stops mattering; then the shortest queue, equal ones in turn."""

    name = "lowest_failure"
    reads_prompt = False

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._rotation = Rotation()

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        return min(self._rotation.rotated(candidates), key=self._rank(self._clock()))

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return tied(candidates, self._rank(self._clock()))

    @staticmethod
    def _rank(now: float) -> Callable[[Replica], tuple[int, float]]:
        return lambda r: (round(r.failures.recent(now)), r.queue)


class CostOptimized:
    """The cheapest node's copy (lowest `cost_tier`) that is not overloaded (policy_kit.overloaded); then the
    shortest queue, equal ones in turn. Every copy's tier is 0 today, so it routes as least_queue (docs/pools.md)."""

    name = "cost_optimized"
    reads_prompt = False

    def __init__(self) -> None:
        self._rotation = Rotation()

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        return min(self._rotation.rotated(within_load(candidates)), key=self._rank)

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        return tied(within_load(candidates), self._rank)

    @staticmethod
    def _rank(replica: Replica) -> tuple[int, float]:
        return replica.cost_tier, replica.queue


class EnergyOptimized:
    """Among the copies that are not overloaded: the least power drawn now (50 W steps) where it is known — the
    copy's /metrics (DCGM's figure), else its GPUs' NVML reading at their nodes' last heartbeat (`node_power_w`) —
    then the lowest GPU cache pressure (10 % steps), then the shortest queue. A copy with no reading counts as
    drawing the most any candidate reports; with none reported it ranks as most_free_kv."""

    name = "energy_optimized"
    reads_prompt = False

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        within = within_load(candidates)
        return min(within, key=self._rank(within))

    def best(self, candidates: Sequence[Replica]) -> Sequence[Replica]:
        within = within_load(candidates)
        return tied(within, self._rank(within))

    @staticmethod
    def _rank(candidates: Sequence[Replica]) -> Callable[[Replica], tuple[int, int, float]]:
        known = [power for power in map(drawn_w, candidates) if power is not None]
        most = max(known, default=0.0)

        def rank(replica: Replica) -> tuple[int, int, float]:
            power = drawn_w(replica)
            return (int((most if power is None else power) // POWER_STEP_W),
                    round(replica.metrics.kv_cache_usage * KV_STEPS), replica.queue)
        return rank


def drawn_w(replica: Replica) -> float | None:
    """The copy's draw: its scraped /metrics figure (fresher: every few seconds), else its nodes' NVML reading."""
    power = replica.metrics.power_watts
    return power if power is not None else replica.node_power_w
