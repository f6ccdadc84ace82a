"""A rollout's traffic split in the endpoint proxy: the shares hold, weight 0 gets nothing while the other
revision has a copy, a split with no eligible copy falls back, and a refresh keeps the interleaving."""

from __future__ import annotations

import time
from collections import Counter

from berth.contracts import RouteCopy, RouteEntry
from gateway.edge.routing import Replica
from gateway.endpoint.route_table import Route, build_route
from gateway.endpoint.traffic_split import TrafficSplit, refreshed


def _copy(copy_id: str, revision: int, ready: bool = True) -> Replica:
    replica = Replica(copy_id=copy_id, url=f"http://{copy_id}", ready=ready, revision=revision)
    replica.metrics.scraped_at = time.monotonic()
    return replica


def _picks(split: TrafficSplit, pool: list[Replica], n: int) -> Counter[int]:
    now = time.monotonic()
    return Counter(split.candidates(pool, now)[0].revision for _ in range(n))


def test_the_split_holds_over_1000_picks() -> None:
    pool = [_copy("a", 1), _copy("b", 1), _copy("c", 2)]
    counts = _picks(TrafficSplit({1: 80, 2: 20}), pool, 1000)
    assert abs(counts[2] - 200) <= 20 and abs(counts[1] - 800) <= 20


def test_smooth_interleaving_spreads_the_small_share() -> None:
    split = TrafficSplit({1: 80, 2: 20})
    order = [split.pick({1, 2}) for _ in range(10)]
    assert order.count(2) == 2 and order[0:5].count(2) == 1


def test_weight_zero_never_chosen_while_the_other_revision_has_a_copy() -> None:
    pool = [_copy("a", 1), _copy("b", 2)]
    assert _picks(TrafficSplit({1: 0, 2: 100}), pool, 200) == Counter({2: 200})


def test_no_eligible_copy_of_a_weighted_revision_falls_back_to_the_pool() -> None:
    pool = [_copy("a", 1), _copy("b", 2, ready=False)]
    split = TrafficSplit({1: 0, 2: 100})
    assert [r.copy_id for r in split.candidates(pool, time.monotonic())] == ["a", "b"]


def test_a_refresh_keeps_the_split_while_its_weights_hold() -> None:
    split = TrafficSplit({1: 50, 2: 50})
    assert refreshed(split, {1: 50, 2: 50}) is split
    changed = refreshed(split, {1: 20, 2: 80})
    assert changed is not split and changed is not None and changed.weights == {1: 20, 2: 80}
    assert refreshed(split, None) is None


def _entry(traffic: dict[int, int] | None) -> RouteEntry:
    return RouteEntry(id="ep", scope="user", owner="u", org="o", service="vllm", workflow_id="wf",
                      routing_policy="round_robin", traffic=traffic,
                      pool=[RouteCopy(copy_id="old", url="http://old", revision=1),
                            RouteCopy(copy_id="new", url="http://new", revision=2)])


def _fresh(route: Route) -> None:
    for replica in route.pool:
        replica.metrics.scraped_at = time.monotonic()


def test_the_route_table_routes_by_the_split_and_keeps_it_across_refreshes() -> None:
    known: dict[str, Replica] = {}
    route = build_route(_entry({1: 0, 2: 100}), None, known, {})
    _fresh(route)
    assert [r.revision for r in route.pool] == [1, 2]
    assert {route.target().copy_id for _ in range(20)} == {"new"}  # type: ignore[union-attr]
    again = build_route(_entry({1: 0, 2: 100}), route, {}, known)
    assert again.traffic is route.traffic
    plain = build_route(_entry(None), again, {}, known)
    _fresh(plain)
    assert plain.traffic is None
    assert {plain.target().copy_id for _ in range(20)} == {"old", "new"}  # type: ignore[union-attr]


def test_a_session_keeps_its_copy_within_the_chosen_revision() -> None:
    route = build_route(_entry({1: 0, 2: 100}), None, {}, {})
    _fresh(route)
    assert {route.target(session_id="s1").copy_id for _ in range(10)} == {"new"}  # type: ignore[union-attr]
