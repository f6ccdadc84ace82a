"""Routing policies, the freshness rule and session affinity (pure functions, no processes)."""

from __future__ import annotations

import pytest

from gateway.edge import routing
from gateway.edge.routing import Replica, ReplicaMetrics

NOW = 1000.0


def replica(copy_id: str, *, running: float = 0, waiting: float = 0, kv: float = 0, ttft: float | None = None,
            scraped_ago: float | None = 1.0, failed_ago: float | None = None, ready: bool = True,
            draining: bool = False) -> Replica:
    metrics = ReplicaMetrics(running=running, waiting=waiting, kv_cache_usage=kv, recent_ttft_s=ttft,
                             scraped_at=None if scraped_ago is None else NOW - scraped_ago,
                             failed_at=None if failed_ago is None else NOW - failed_ago)
    return Replica(copy_id=copy_id, url=f"http://{copy_id}", ready=ready, draining=draining, metrics=metrics)


def pick(name: str, replicas: list[Replica], session: str | None = None) -> str | None:
    chosen = routing.choose(routing.make(name), replicas, NOW, session)
    return chosen.copy_id if chosen else None


def test_least_queue_counts_waiting_running_and_in_flight() -> None:
    pool = [replica("a", running=4, waiting=2), replica("b", running=3), replica("c", running=1, waiting=1)]
    assert pick("least_queue", pool) == "c"
    pool[2].in_flight = 5
    assert pick("least_queue", pool) == "b"


def test_lowest_ttft_and_unmeasured_replicas() -> None:
    pool = [replica("a", ttft=0.8), replica("b", ttft=0.2), replica("c", ttft=0.5)]
    assert pick("lowest_ttft", pool) == "b"
    # A replica with no measurement yet counts as the best seen; the shorter queue breaks the tie.
    pool.append(replica("d", ttft=None))
    pool[1].in_flight = 3
    assert pick("lowest_ttft", pool) == "d"


def test_most_free_kv() -> None:
    pool = [replica("a", kv=0.9), replica("b", kv=0.1), replica("c", kv=0.5)]
    assert pick("most_free_kv", pool) == "b"


def test_most_free_kv_does_not_herd_on_a_stale_near_tie() -> None:
    """Copies within a few percent of each other tie; the live queue decides (no herd between scrapes)."""
    pool = [replica("a", kv=0.02), replica("b", kv=0.03)]
    pool[0].in_flight = 3  # this router already sent the "emptiest" copy three requests since the scrape
    assert pick("most_free_kv", pool) == "b"


def test_round_robin_cycles() -> None:
    policy = routing.make("round_robin")
    pool = [replica("a"), replica("b"), replica("c")]
    chosen = [routing.choose(policy, pool, NOW) for _ in range(6)]
    assert [r.copy_id for r in chosen if r] == ["a", "b", "c", "a", "b", "c"]


def test_least_queue_spreads_equal_queues() -> None:
    policy = routing.make("least_queue")
    pool = [replica("a"), replica("b"), replica("c")]
    assert {routing.choose(policy, pool, NOW).copy_id for _ in range(3)} == {"a", "b", "c"}  # type: ignore[union-attr]


@pytest.mark.parametrize("case", ["stale", "never", "failed", "draining", "not-ready"])
def test_ineligible_replicas_are_skipped(case: str) -> None:
    bad = {
        "stale": replica("x", scraped_ago=31),
        "never": replica("x", scraped_ago=None),
        "failed": replica("x", scraped_ago=2, failed_ago=1),  # a failed scrape is not "idle"
        "draining": replica("x", draining=True),
        "not-ready": replica("x", ready=False),
    }[case]
    busy = replica("busy", running=50, waiting=50, kv=0.99, ttft=9.0)
    for name in routing.POLICIES:
        assert pick(name, [bad, busy]) == "busy", name
    assert pick("least_queue", [bad]) is None


def test_a_good_scrape_after_a_failure_restores_the_replica() -> None:
    assert pick("least_queue", [replica("x", scraped_ago=0.5, failed_ago=1)]) == "x"


def test_session_affinity_is_sticky_and_moves_only_when_its_replica_leaves() -> None:
    pool = [replica(name) for name in "abcd"]
    homes = {f"s{i}": pick("least_queue", pool, f"s{i}") for i in range(40)}
    assert len(set(homes.values())) > 1  # sessions spread
    for session, home in homes.items():
        assert pick("round_robin", pool, session) == home  # stable whatever the policy
    pool[0].draining = True
    for session, home in homes.items():
        if home != "a":
            assert pick("least_queue", pool, session) == home


def test_unknown_policy_names_the_valid_ones() -> None:
    with pytest.raises(ValueError,
                       match="cost_optimized, energy_optimized, .*, round_robin, site_local, weighted_capacity$"):
        routing.make("fastest")


def test_a_prompt_key_keeps_its_copy_only_among_the_equally_good() -> None:
    """A PromptKey (the proxy's hash of a prompt's start) is affinity among the copies the policy ranks
    best: idle copies all tie, so a prompt stays on one; a busier copy is left; round robin keeps its turns."""
    pool = [replica(name) for name in "abc"]
    key = routing.PromptKey("prompt:1")
    home = pick("least_queue", pool, key)
    assert all(pick(name, pool, key) == home for name in ("least_queue", "lowest_ttft", "most_free_kv")
               for _ in range(5))
    assert len({pick("least_queue", pool, routing.PromptKey(f"prompt:{n}")) for n in range(30)}) > 1
    next(r for r in pool if r.copy_id == home).in_flight = 4
    assert pick("least_queue", pool, key) != home  # load-aware routing stays
    policy = routing.make("round_robin")
    assert [routing.choose(policy, pool, NOW, key).copy_id for _ in range(3)] == ["a", "b", "c"]  # type: ignore[union-attr]
