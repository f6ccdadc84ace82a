"""The routing explanation's decisions without a server (server/explain_routing.py): each exclusion in the routers'
order, a rollout's split with its shares and its fallback, LiteLLM's list, and the freshness rule the proxy uses."""

from __future__ import annotations

import pytest

from gateway.edge import routing
from server.explain_routing import PREFERENCES, Endpoint, PoolCopy, Scrape, explain_routing

pytestmark = pytest.mark.timeout(30)
NOW = 1000.0


def _endpoint(weights: dict[int, int] | None = None, fronts_pool: bool = False,
              litellm_routed: frozenset[str] | None = None) -> Endpoint:
    return Endpoint(endpoint_id="ep-1", workflow_id="wf-1", policy="round_robin", weights=weights,
                    fronts_pool=fronts_pool, litellm_routed=litellm_routed)


def _verdicts(endpoint: Endpoint, copies: list[PoolCopy],
              scrapes: dict[str, Scrape] | None = None) -> dict[str, tuple[str, float | None]]:
    answer = explain_routing(endpoint, copies, scrapes, NOW)
    return {c.copy_id: (c.verdict, c.share_percent) for c in answer.copies}


def test_not_ready_and_draining_copies_are_out_and_the_rest_share_alike() -> None:
    copies = [PoolCopy("c0", 1, True, False), PoolCopy("c1", 1, False, False), PoolCopy("c2", 1, True, True),
              PoolCopy("c3", 1, True, False)]
    answer = explain_routing(_endpoint(), copies, None, NOW)
    assert {c.copy_id: (c.verdict, c.share_percent) for c in answer.copies} == {
        "c0": ("included", 50.0), "c1": ("not_ready", None), "c2": ("draining", None), "c3": ("included", 50.0)}
    assert answer.router == "endpoint_proxy" and answer.revision_shares == {1: 100.0}
    assert answer.note is not None and "is not known here" in answer.note  # no proxy reported its scrapes
    assert all(c.metrics_fresh is None for c in answer.copies)


def test_a_split_shares_by_weight_and_a_revision_at_zero_is_out() -> None:
    copies = [PoolCopy("old-0", 1, True, False), PoolCopy("new-0", 2, True, False), PoolCopy("new-1", 2, True, False),
              PoolCopy("blue", 3, True, False)]
    answer = explain_routing(_endpoint({1: 90, 2: 10, 3: 0}), copies, None, NOW)
    assert {c.copy_id: (c.verdict, c.share_percent) for c in answer.copies} == {
        "old-0": ("included", 90.0), "new-0": ("included", 5.0), "new-1": ("included", 5.0),
        "blue": ("revision_weight_0", None)}
    assert answer.revision_shares == {1: 90.0, 2: 10.0}


def test_a_weighted_revision_with_no_eligible_copy_gives_its_share_away_and_none_at_all_opens_the_pool() -> None:
    # Revision 2 has 10 % but no ready copy: the split offers only revision 1 (TrafficSplit.pick).
    renormalized = _verdicts(_endpoint({1: 90, 2: 10}), [PoolCopy("a", 1, True, False), PoolCopy("b", 2, False, False)])
    assert renormalized == {"a": ("included", 100.0), "b": ("not_ready", None)}
    # No weighted revision has an eligible copy: a split never fails a request, the whole pool is routed to.
    fallback = _verdicts(_endpoint({1: 100, 2: 0}), [PoolCopy("a", 1, False, False), PoolCopy("b", 2, True, False)])
    assert fallback == {"a": ("not_ready", None), "b": ("included", 100.0)}


def test_stale_and_failed_scrapes_by_the_proxys_rule() -> None:
    copies = [PoolCopy(name, 1, True, False) for name in ("fresh", "stale", "never", "failed", "recovered")]
    scrapes = {"fresh": Scrape(NOW - 5, None), "stale": Scrape(NOW - 31, None), "never": Scrape(None, None),
               "failed": Scrape(NOW - 5, NOW - 2), "recovered": Scrape(NOW - 1, NOW - 2)}
    answer = explain_routing(_endpoint(), copies, scrapes, NOW)
    by_copy = {c.copy_id: c for c in answer.copies}
    assert {name: c.verdict for name, c in by_copy.items()} == {
        "fresh": "included", "stale": "metrics_stale", "never": "metrics_stale", "failed": "scrape_failed",
        "recovered": "included"}
    assert by_copy["stale"].detail == "last scraped 31 s ago (more than 30 s)"
    assert by_copy["fresh"].metrics_fresh is True and by_copy["failed"].metrics_fresh is False
    assert answer.note is None


def test_behind_litellm_only_the_copies_it_lists_are_routed() -> None:
    copies = [PoolCopy("a", 1, True, False), PoolCopy("b", 1, True, False)]
    listed = explain_routing(_endpoint(fronts_pool=True, litellm_routed=frozenset({"a"})), copies, {}, NOW)
    assert listed.router == "litellm"
    assert [(c.copy_id, c.verdict) for c in listed.copies] == [("a", "included"), ("b", "not_in_litellm")]
    unreported = explain_routing(_endpoint(fronts_pool=True), copies, {}, NOW)
    assert unreported.note == "the pool's LiteLLM proxy has not yet said which copies it routes to"


def test_behind_litellm_a_revision_at_zero_is_out_with_no_fallback() -> None:
    endpoint = Endpoint(endpoint_id="ep-1", workflow_id="wf-1", policy="least_queue", weights={1: 100, 2: 0},
                        fronts_pool=True, litellm_routed=None)
    answer = explain_routing(endpoint, [PoolCopy("old", 1, False, False), PoolCopy("new", 2, True, False)], {}, NOW)
    assert [(c.copy_id, c.verdict) for c in answer.copies] == [("new", "revision_weight_0"), ("old", "not_ready")]
    assert answer.revision_shares == {}
    assert answer.note is not None and answer.note.startswith("no copy takes requests now")


@pytest.mark.parametrize("policy", ["most_free_vram", "weighted_capacity", "highest_throughput", "lowest_failure",
                                    "cost_optimized", "energy_optimized", "prefix_affinity"])
def test_the_freshness_rule_and_verdicts_hold_for_every_policy(policy: str) -> None:
    """Issue 36's policies choose only among the included copies: a stale or failed copy is out under each, and a
    policy that prefers some copies says its shares are for equal load."""
    copies = [PoolCopy(name, 1, True, False) for name in ("fresh", "stale", "failed")]
    scrapes = {"fresh": Scrape(NOW - 5, None), "stale": Scrape(NOW - 31, None), "failed": Scrape(NOW - 5, NOW - 2)}
    endpoint = Endpoint(endpoint_id="ep-1", workflow_id="wf-1", policy=policy, weights=None, fronts_pool=False,
                        litellm_routed=None)
    answer = explain_routing(endpoint, copies, scrapes, NOW)
    assert {c.copy_id: c.verdict for c in answer.copies} == {
        "fresh": "included", "stale": "metrics_stale", "failed": "scrape_failed"}
    assert answer.policy == policy and set(PREFERENCES) <= set(routing.POLICIES)
    if policy == "most_free_vram":
        assert answer.note is None
    else:
        assert answer.note is not None and answer.note.startswith(f"shares are for equal load: {policy}")
