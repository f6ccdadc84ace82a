"""site_local routing (issue 36; gateway/edge/site_local.py) on constructed metrics: the preferred site's copies take
the requests, a saturated preferred site spills only to the failover sites, a copy outside them (outside residency,
or just not named) is never chosen — sessions and prompt keys included —, and a stale or failed preferred copy is
never weighed as idle. The ranks are the control plane's (berth/sites.py `route_rank`), carried by the routing table
to the proxy's Replica."""

from __future__ import annotations

from collections import Counter

import pytest

from berth.contracts import RouteCopy, RouteEntry
from berth.sites import route_rank
from gateway.edge import routing
from gateway.edge.prompt_key import PromptKey
from gateway.edge.replica import Replica, ReplicaMetrics
from gateway.endpoint.route_table import build_route

pytestmark = pytest.mark.timeout(30)
NOW = 1000.0
# The endpoint prefers eu-west, fails over to eu-north, and its residency is eu: us-east is never routed to.
RULES = {"preferred": "eu-west", "failover": ("eu-north",), "allowed": (), "residency": "eu"}


def replica(copy_id: str, site: str | None, *, queue: float = 0, scraped_ago: float | None = 1.0,
            failed_ago: float | None = None) -> Replica:
    figures = ReplicaMetrics(running=queue, scraped_at=None if scraped_ago is None else NOW - scraped_ago,
                             failed_at=None if failed_ago is None else NOW - failed_ago)
    return Replica(copy_id=copy_id, url=f"http://{copy_id}", metrics=figures, site=site,
                   site_rank=route_rank(site, **RULES))


def picks(pool: list[Replica], count: int = 40, session: str | None = None) -> Counter[str]:
    policy = routing.make("site_local")
    chosen = [routing.choose(policy, pool, NOW, session) for _ in range(count)]
    return Counter(r.copy_id if r is not None else "none" for r in chosen)


def test_the_ranks_the_control_plane_gives() -> None:
    assert [route_rank(site, **RULES) for site in ("eu-west", "eu-north", "eu-south", "us-east", None)] == [
        0, 1, None, None, None]
    # No preference: every copy within the residency (or AllowedSites) ranks 0; none outside.
    assert [route_rank(site, "", (), ("a", "b"), "") for site in ("a", "b", "c", None)] == [0, 0, None, None]
    assert route_rank(None, "", (), (), "") == 0  # no site rule at all: every copy, sited or not


def test_the_preferred_site_takes_the_requests_shortest_queue_first() -> None:
    pool = [replica("west-1", "eu-west", queue=2), replica("west-2", "eu-west", queue=2),
            replica("north", "eu-north", queue=0), replica("east", "us-east", queue=0)]
    assert set(picks(pool)) == {"west-1", "west-2"}  # equal queues share; the idle failover and us-east get none
    pool[0].metrics.running = 5
    assert set(picks(pool)) == {"west-2"}


def test_a_saturated_preferred_site_spills_to_the_failover_site_only() -> None:
    # eu-west's shortest queue (5) is more than 4 above eu-north's (0): eu-north joins, and as the shortest queue
    # takes the request; the idle us-east copy never does.
    pool = [replica("west-1", "eu-west", queue=5), replica("west-2", "eu-west", queue=6),
            replica("north", "eu-north", queue=0), replica("east", "us-east", queue=0)]
    assert picks(pool, 1) == Counter({"north": 1})
    # At 4 above it, not more: no spill.
    pool[0].metrics.running = 4
    assert set(picks(pool)) == {"west-1"}
    # The router's own in-flight requests count: eu-north's fill up until eu-west is shorter again.
    pool[0].metrics.running, pool[2].metrics.running = 9, 1
    assert picks(pool, 1) == Counter({"north": 1})
    pool[2].in_flight = 5
    assert set(picks(pool)) == {"west-2"}


def test_a_stale_or_failed_preferred_copy_is_not_idle_and_the_failover_serves() -> None:
    for stale in (replica("west", "eu-west", scraped_ago=31), replica("west", "eu-west", scraped_ago=None),
                  replica("west", "eu-west", scraped_ago=2, failed_ago=1)):
        assert picks([stale, replica("north", "eu-north", queue=30)]) == Counter({"north": 40})
    # With nothing fresh in the preferred or failover sites: no copy at all, never one outside residency.
    assert picks([replica("west", "eu-west", scraped_ago=31), replica("east", "us-east")]) == Counter({"none": 40})


def test_a_session_or_prompt_key_never_leaves_the_sites() -> None:
    pool = [replica("west", "eu-west", queue=1), replica("east", "us-east"), replica("other", "eu-south")]
    for session in ("user-1", "user-2", PromptKey("prefix-1"), PromptKey("prefix-2")):
        assert picks(pool, 5, session) == Counter({"west": 5})


def test_the_routing_table_carries_each_copys_site_to_its_replica() -> None:
    entry = RouteEntry(id="ep-1", scope="group", owner="u", org="o", routing_policy="site_local", pool=[
        RouteCopy(copy_id="wf.copy-0", url="http://a", site="eu-west", site_rank=0),
        RouteCopy(copy_id="wf.copy-1", url="http://b", site="us-east", site_rank=None),
        RouteCopy(copy_id="wf.copy-2", url="http://c")])  # from a control plane that sends no site: rank 0
    route = build_route(entry, None, {}, {})
    assert [(r.copy_id, r.site, r.site_rank) for r in route.pool] == [
        ("wf.copy-0", "eu-west", 0), ("wf.copy-1", "us-east", None), ("wf.copy-2", None, 0)]
    assert route.policy.name == "site_local"
