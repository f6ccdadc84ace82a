"""Explain routing (`GET /v1/explain/routing/{endpoint}`, docs/explain.md): pure functions from an endpoint's copies
as the store holds them (the same rows `/v1/internal/routes` sends the proxies) to the RoutingExplanation contract,
by the routers' own rules (berth/routing_rules.py; gateway/edge/routing.py `eligible`; the split's fallback in
gateway/endpoint/traffic_split.py). No I/O: the route reads the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from berth.contracts.explain import CopyRouting, Router, RoutingExplanation, RoutingVerdict
from berth.routing_rules import FRESH_FOR_S, metrics_fresh, revision_weighted

NOT_SCRAPED_HERE = ("no endpoint proxy reported its scrapes of these copies in the last 30 s (they report every 5 s; "
                    "LiteLLM keeps its own): whether a copy's figures are fresh (scraped within "
                    f"{FRESH_FOR_S:.0f} s, no failure since) is not known here")
# The policies (gateway/edge/routing.py POLICIES) under which equally loaded copies do not share alike: what the
# expected shares leave out. Every policy picks only among the included copies: the verdicts hold for all of them.
PREFERENCES = {
    "prefix_affinity": "prefix_affinity sends a prompt to the copy that last served its longest shared prefix, "
                       "unless that copy's queue is more than 4 above the mean: shares follow the prompts",
    "cost_optimized": "cost_optimized fills the cheapest nodes' copies first, up to 4 above the mean queue",
    "energy_optimized": "energy_optimized fills the copies drawing the least power first, up to 4 above the mean "
                        "queue",
    "lowest_failure": "lowest_failure avoids copies with recent failed requests (halving each minute)",
    "highest_throughput": "highest_throughput weighs each copy's measured tokens/s",
    "weighted_capacity": "weighted_capacity shares in proportion to free KV cache over queue",
    "site_local": "site_local keeps to the preferred site's copies, its failover sites' joining while those are "
                  "more than 4 above the mean queue; never a copy outside them",
}


@dataclass(frozen=True)
class PoolCopy:
    """One published copy, as its replica row holds it."""

    copy_id: str
    revision: int
    ready: bool
    draining: bool
    site: str | None = None  # its rank-0 node's site (issue 36)
    site_rank: int | None = 0  # how site_local ranks it (berth/sites.py route_rank): 0, 1 (failover) or None


@dataclass(frozen=True)
class Scrape:
    """What a router last saw of a copy's /metrics, on one clock with `now`."""

    scraped_at: float | None  # last successful scrape; None: never
    failed_at: float | None  # last failed scrape or connect failure; None: none


@dataclass(frozen=True)
class Endpoint:
    """What the routers know of the endpoint beyond its copies (the routes table's fields)."""

    endpoint_id: str
    workflow_id: str
    policy: str
    weights: dict[int, int] | None  # a rollout's split; None: none set
    fronts_pool: bool  # LiteLLM picks the copy (Proxy=true)
    litellm_routed: frozenset[str] | None  # the copies LiteLLM last said it routes to; None: not reported yet
    service: bool = False  # a service with no copies of its own


def first_exclusion(copy: PoolCopy, endpoint: Endpoint, scrape: Scrape | None,
                    now: float) -> tuple[RoutingVerdict, str] | None:
    """The first rule that keeps the copy from the endpoint's requests, with its figures; None: none does (the
    split's own rule, revision weight 0, is judged over the whole pool by `verdicts`)."""
    if not copy.ready:
        return "not_ready", "not ready: its readiness check has not passed (or failed since)"
    if copy.draining:
        return "draining", "draining: it finishes its requests and takes no new one"
    if endpoint.policy == "site_local" and copy.site_rank is None:
        return "outside_sites", (f"at {f'site {copy.site}' if copy.site else 'no site'}: site_local sends nothing "
                                 "outside the endpoint's PreferredSite and FailoverSites, within its AllowedSites "
                                 "and Residency")
    if endpoint.fronts_pool and not revision_weighted(endpoint.weights, copy.revision):
        # LiteLLM is never sent a 0 % revision's copies (/v1/internal/endpoints/{id}/replicas): no fallback there.
        return "revision_weight_0", f"its revision {copy.revision} has 0 % of the traffic split"
    if endpoint.fronts_pool and endpoint.litellm_routed is not None and copy.copy_id not in endpoint.litellm_routed:
        return "not_in_litellm", "the pool's LiteLLM proxy did not list it among the copies it routes to"
    if scrape is not None and not metrics_fresh(scrape.scraped_at, scrape.failed_at, now):
        if scrape.failed_at is not None and (scrape.scraped_at is None or scrape.failed_at >= scrape.scraped_at):
            return "scrape_failed", f"its last scrape failed {now - scrape.failed_at:.0f} s ago: out until one succeeds"
        if scrape.scraped_at is None:
            return "metrics_stale", "never scraped yet"
        return "metrics_stale", (f"last scraped {now - scrape.scraped_at:.0f} s ago "
                                 f"(more than {FRESH_FOR_S:.0f} s)")
    return None


def by_copies(revisions: Sequence[int]) -> dict[int, float]:
    """Each revision's share when the policy alone picks among the copies: in proportion to its copies."""
    return {r: 100.0 * revisions.count(r) / len(revisions) for r in set(revisions)}


def shares(endpoint: Endpoint, revisions: Sequence[int]) -> tuple[dict[int, float], bool]:
    """Each revision's share of requests now, from its eligible copies' revisions, and whether the split holds.
    The proxy's split offers only the weighted revisions with an eligible copy, in proportion to their weights;
    when none has one, it narrows nothing (a split never fails a request: TrafficSplit.candidates). LiteLLM is sent
    only the weighted revisions' copies and shares among them by its own policy."""
    weights = endpoint.weights
    weighted = {r for r in revisions if revision_weighted(weights, r)}
    if endpoint.fronts_pool or weights is None or not weighted:
        return by_copies(revisions), False
    total = sum(weights[r] for r in weighted)
    return {r: 100.0 * weights[r] / total for r in weighted}, True


def verdicts(endpoint: Endpoint, copies: Sequence[PoolCopy], scrapes: Mapping[str, Scrape] | None,
             now: float) -> tuple[list[CopyRouting], dict[int, float]]:
    """Every copy's verdict and expected share, and each revision's share."""
    excluded = {c.copy_id: first_exclusion(c, endpoint, None if scrapes is None else scrapes.get(c.copy_id), now)
                for c in copies}
    eligible = [c for c in copies if excluded[c.copy_id] is None]
    by_revision, split_holds = shares(endpoint, [c.revision for c in eligible])
    if split_holds:
        for c in eligible:
            if c.revision not in by_revision:
                excluded[c.copy_id] = ("revision_weight_0", f"its revision {c.revision} has 0 % of the traffic split")
    per_revision = {r: sum(1 for c in eligible if c.revision == r and excluded[c.copy_id] is None)
                    for r in by_revision}
    answer = []
    for c in sorted(copies, key=lambda c: c.copy_id):
        fresh = None if scrapes is None or c.copy_id not in scrapes else metrics_fresh(
            scrapes[c.copy_id].scraped_at, scrapes[c.copy_id].failed_at, now)
        reason = excluded[c.copy_id]
        if reason is not None:
            answer.append(CopyRouting(copy_id=c.copy_id, revision=c.revision, verdict=reason[0], detail=reason[1],
                                      metrics_fresh=fresh))
            continue
        share = round(by_revision[c.revision] / per_revision[c.revision], 1)
        detail = f"ready; revision {c.revision} takes {by_revision[c.revision]:.0f} % of requests"
        if endpoint.policy == "site_local" and c.site_rank == 1:
            detail += f"; at failover site {c.site}: only while the preferred site is saturated"
        answer.append(CopyRouting(copy_id=c.copy_id, revision=c.revision, verdict="included", detail=detail,
                                  share_percent=share, metrics_fresh=fresh))
    return answer, {r: round(share, 1) for r, share in sorted(by_revision.items())}


def explain_routing(endpoint: Endpoint, copies: Sequence[PoolCopy], scrapes: Mapping[str, Scrape] | None,
                    now: float) -> RoutingExplanation:
    """The endpoint's routing now. `scrapes` None: the routers' scrapes are not known (the control plane's case)."""
    router: Router = "service" if endpoint.service else "litellm" if endpoint.fronts_pool else "endpoint_proxy"
    routed, revision_shares = verdicts(endpoint, copies, scrapes, now)
    notes = []
    if endpoint.service:
        notes.append("a service with no copies of its own: the endpoint sends every request to it")
    elif not copies:
        notes.append("no copy is published: a request waits while the pool wakes or places one")
    elif not any(c.verdict == "included" for c in routed):
        notes.append("no copy takes requests now: a request is held until one is ready")
    elif endpoint.policy in PREFERENCES:
        notes.append(f"shares are for equal load: {PREFERENCES[endpoint.policy]}")
    if endpoint.fronts_pool and endpoint.litellm_routed is None and copies:
        notes.append("the pool's LiteLLM proxy has not yet said which copies it routes to")
    if scrapes is None and copies:
        notes.append(NOT_SCRAPED_HERE)
    return RoutingExplanation(endpoint_id=endpoint.endpoint_id, workflow_id=endpoint.workflow_id, router=router,
                              policy=endpoint.policy, weights=endpoint.weights, revision_shares=revision_shares,
                              copies=routed, note="; ".join(notes) or None)
