"""The capacity routing policies of issue 36 (gateway/edge/capacity_policies.py, most_free_vram) on constructed
metrics: each one's weights, and the freshness rule — a stale or failed copy is never weighed, let alone as idle."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.edge import metrics, routing
from gateway.edge.capacity_policies import LowestFailure, capacity_weight
from gateway.edge.replica import FAILURE_HALF_LIFE_S, FailedRequests, Replica, ReplicaMetrics

NOW = 1000.0
NEW_POLICIES = ("most_free_vram", "weighted_capacity", "highest_throughput", "lowest_failure", "cost_optimized",
                "energy_optimized", "prefix_affinity", "site_local")


def replica(copy_id: str, *, running: float = 0, waiting: float = 0, kv: float = 0, tokens_per_s: float | None = None,
            power: float | None = None, scraped_ago: float | None = 1.0, failed_ago: float | None = None,
            cost_tier: int = 0) -> Replica:
    figures = ReplicaMetrics(running=running, waiting=waiting, kv_cache_usage=kv, tokens_per_s=tokens_per_s,
                             power_watts=power, scraped_at=None if scraped_ago is None else NOW - scraped_ago,
                             failed_at=None if failed_ago is None else NOW - failed_ago)
    return Replica(copy_id=copy_id, url=f"http://{copy_id}", metrics=figures, cost_tier=cost_tier)


def pick(policy: routing.Policy | str, pool: list[Replica]) -> str | None:
    chosen = routing.choose(routing.make(policy) if isinstance(policy, str) else policy, pool, NOW)
    return chosen.copy_id if chosen else None


@pytest.mark.parametrize("name", NEW_POLICIES)
@pytest.mark.parametrize("case", ["stale", "never", "failed"])
def test_a_stale_or_failed_copy_is_never_taken_for_idle(name: str, case: str) -> None:
    """The idlest, emptiest, fastest, cheapest, coolest copy with no failures — but its figures are stale or its
    scrape failed: every request goes to the busy copy whose figures are fresh."""
    idle = {"stale": replica("idle", scraped_ago=31, tokens_per_s=500, power=50, cost_tier=0),
            "never": replica("idle", scraped_ago=None, tokens_per_s=500, power=50, cost_tier=0),
            "failed": replica("idle", scraped_ago=2, failed_ago=1, tokens_per_s=500, power=50, cost_tier=0)}[case]
    busy = replica("busy", running=40, waiting=30, kv=0.95, tokens_per_s=5, power=650, cost_tier=3)
    busy.failures.add(NOW)
    policy = routing.make(name)
    assert {pick(policy, [idle, busy]) for _ in range(20)} == {"busy"}
    assert pick(policy, [idle]) is None


def test_most_free_vram_is_most_free_kv_under_the_design_name() -> None:
    policy = routing.make("most_free_vram")
    assert isinstance(policy, routing.MostFreeKv) and policy.name == "most_free_vram"
    assert pick(policy, [replica("a", kv=0.9), replica("b", kv=0.1), replica("c", kv=0.5)]) == "b"


def test_weighted_capacity_shares_in_proportion_to_free_capacity() -> None:
    """Free KV 0.8 / queue 0, 0.4 / 0, 0.8 / queue 3 (weight 0.2): 8 : 4 : 2 of every 14 requests, interleaved."""
    pool = [replica("a", kv=0.2), replica("b", kv=0.6), replica("c", kv=0.2, running=3)]
    assert [capacity_weight(r) for r in pool] == pytest.approx([0.8, 0.4, 0.2])
    policy = routing.make("weighted_capacity")
    picks = [pick(policy, pool) for _ in range(140)]
    assert Counter(picks) == {"a": 80, "b": 40, "c": 20}
    assert picks[:7] == ["a", "b", "a", "c", "a", "b", "a"]  # smooth: never a run of one copy's share


def test_weighted_capacity_is_deterministic_and_counts_its_own_in_flight() -> None:
    pool = [replica("a"), replica("b")]
    first, second = routing.make("weighted_capacity"), routing.make("weighted_capacity")
    assert [pick(first, pool) for _ in range(10)] == [pick(second, pool) for _ in range(10)]
    pool[0].in_flight = 9  # sent there since the scrape: a's weight falls to a tenth of b's
    policy = routing.make("weighted_capacity")
    assert Counter(pick(policy, pool) for _ in range(110)) == {"a": 10, "b": 100}


def test_weighted_capacity_with_every_cache_full_takes_the_shortest_queue() -> None:
    assert pick("weighted_capacity", [replica("a", kv=1.0, running=5), replica("b", kv=1.0, running=2)]) == "b"


def test_highest_throughput_weighs_speed_against_the_queue() -> None:
    """Speed over the queue it would join: 40 tokens/s behind one request (20) loses to 25 idle; 40 idle wins."""
    pool = [replica("fast", tokens_per_s=40, running=1), replica("slow", tokens_per_s=25)]
    assert pick("highest_throughput", pool) == "slow"
    pool[0].metrics.running = 0
    assert pick("highest_throughput", pool) == "fast"
    # Not measured yet: counts as the fastest seen, and the shorter queue breaks the tie.
    pool.append(replica("new", tokens_per_s=None))
    pool[0].in_flight = 1
    assert pick("highest_throughput", pool) == "new"


def test_the_scrape_measures_tokens_per_second_per_running_request() -> None:
    figures = ReplicaMetrics()
    metrics.apply(figures, {"generation_tokens": 1000.0, "running": 4.0}, now=10.0)
    assert figures.tokens_per_s is None  # one scrape: no rate yet
    metrics.apply(figures, {"generation_tokens": 1400.0, "running": 4.0}, now=12.0)
    assert figures.tokens_per_s == pytest.approx(50.0)  # 400 tokens in 2 s over 4 sequences
    metrics.apply(figures, {"generation_tokens": 1400.0, "running": 0.0}, now=14.0)
    assert figures.tokens_per_s == pytest.approx(50.0)  # idle: not slow
    metrics.apply(figures, {"generation_tokens": 10.0}, now=16.0)  # the engine restarted: no rate this round
    assert figures.tokens_per_s == pytest.approx(50.0) and figures.generation_tokens == 10.0
    parsed = metrics.parse('vllm:generation_tokens_total{model_name="m"} 123.0\n'
                           'DCGM_FI_DEV_POWER_USAGE{gpu="0"} 200.5\nDCGM_FI_DEV_POWER_USAGE{gpu="1"} 100\n')
    assert parsed == {"generation_tokens": 123.0, "power_watts": 300.5}
    metrics.apply(figures, parsed, now=18.0)
    assert figures.power_watts == 300.5
    metrics.apply(figures, {}, now=20.0)
    assert figures.power_watts is None  # no longer reported: not a stale reading


def test_failed_requests_decay_by_half_each_minute() -> None:
    failures = FailedRequests()
    failures.add(NOW)
    failures.add(NOW)
    assert failures.recent(NOW + FAILURE_HALF_LIFE_S) == pytest.approx(1.0)
    failures.add(NOW + FAILURE_HALF_LIFE_S)
    assert failures.recent(NOW + 3 * FAILURE_HALF_LIFE_S) == pytest.approx(0.5)


def test_lowest_failure_avoids_the_copy_that_failed_recently_until_it_fades() -> None:
    clock = [NOW]
    policy = LowestFailure(clock=lambda: clock[0])
    pool = [replica("flaky"), replica("steady", running=3)]
    for _ in range(3):
        pool[0].failures.add(NOW)
    assert {pick(policy, pool) for _ in range(5)} == {"steady"}  # a longer queue, but no failures
    clock[0] = NOW + 3 * FAILURE_HALF_LIFE_S  # 3 failures then count 0.375: rounded, none
    assert pick(policy, pool) == "flaky"
    even = [replica("a"), replica("b")]
    assert {pick(policy, even) for _ in range(2)} == {"a", "b"}  # equal copies share the load


def test_cost_optimized_prefers_the_cheap_tier_until_it_is_overloaded() -> None:
    pool = [replica("dear", cost_tier=2), replica("cheap", cost_tier=1, running=3)]
    assert pick("cost_optimized", pool) == "cheap"
    pool[1].metrics.running = 9  # mean 4.5: 9 is more than 4 above it
    assert pick("cost_optimized", pool) == "dear"
    equal = [replica("a"), replica("b"), replica("c", running=1)]  # no tiers today: least_queue, in turn
    policy = routing.make("cost_optimized")
    assert {pick(policy, equal) for _ in range(4)} == {"a", "b"}


def test_energy_optimized_prefers_low_power_then_low_cache_pressure() -> None:
    pool = [replica("hot", power=600, kv=0.1), replica("cool", power=250, kv=0.7)]
    assert pick("energy_optimized", pool) == "cool"
    pool.append(replica("unread", power=None, kv=0.0))  # no reading: counts as the most any copy draws
    assert pick("energy_optimized", pool) == "cool"
    pool[1].metrics.running = 12  # mean 4: overloaded, so the coolest gives way
    assert pick("energy_optimized", pool) == "unread"
    no_power = [replica("a", kv=0.8), replica("b", kv=0.3)]
    assert pick("energy_optimized", no_power) == "b"  # as most_free_kv without readings
