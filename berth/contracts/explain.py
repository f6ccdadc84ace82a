"""Explain contracts (`GET /v1/explain/placement|routing|failure/{id}`): where the scheduler put each copy of a
workflow and why, which filter turned every other node away, and for a copy it cannot place now the smallest change
that would place it; which copies behind an endpoint get its requests and why the others do not; and every recorded
reason a copy or rank ended. docs/explain.md says what each field means."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from berth.contracts.base import Number, Response

# What the scheduler made of one node for one copy (server/scheduler.py): chosen for a rank, passed every filter but
# scored below the chosen, or the first filter that turned it away (scheduler.Filter, in `place`'s order).
# "quota": the node would take the copy, but a quota binding its workflow's owner refuses it (docs/policies.md).
# outside_sites, site_full, site_taken: the pool's site rules (AllowedSites/Residency, MaxCopiesPerSite, MinSites).
NodeOutcome = Literal["chosen", "scored_lower", "quota", "offline", "draining", "tainted", "outside_sites", "site_full",
                      "site_taken", "gpus_too_small", "gpus_unhealthy", "busy"]


class ScoreTerms(Response):
    """The terms of the scheduler's score for a node that passed every filter (server/scheduler.py `score`)."""

    model_on_node: bool  # the copy's volume or model digest is on the node: the cache hit, scored first
    free_gpus: int = Field(ge=0)  # free GPUs of the size asked for: fewer first under pack, more under spread
    order: int = Field(ge=1)  # its place among the nodes that passed (1: the scheduler's first choice)
    # The site terms, scored before the cache hit (server/site_placement.py); None where no site rule applies.
    preferred_site: bool | None = None  # in the pool's PreferredSite (True too when it names none)
    pool_copies_in_domain: int | None = Field(None, ge=0)  # the pool's other copies in its failure domain


class NodeVerdict(Response):
    """One node for one copy."""

    node: str
    outcome: NodeOutcome
    detail: str  # one line: the figures behind the outcome ("1 of 2 GPUs of ≥ 67 GB free, needs 2")
    gpus: list[int]  # the GPU indices the copy holds there (chosen) or would take (empty otherwise)
    score: ScoreTerms | None = None  # for chosen and scored_lower nodes


class CopyPlacement(Response):
    """One copy: placed (its nodes and why the others were not), or what placing it now meets."""

    # `{workflow}.copy-N`; None for the workflow's next copy (what a blocked copy's next try or a scale-out meets).
    copy_id: str | None
    placed: bool  # it holds its GPUs now (a reservation)
    # True when the scheduler would place it now (a placed copy: would place it again on the same terms).
    fits_now: bool
    # The scheduler's one line when it would not place it now (a copy's `scheduling_blocked` reason).
    blocked_reason: str | None = None
    # No amount of waiting places it on this cluster as it is (server/scheduler.py rejection_reason).
    never_reason: str | None = None
    nodes: list[NodeVerdict]  # the chosen first (by rank), then the rest by outcome order and id
    advice: list[str]  # for a copy not placed now: the smallest changes that would place it, one line each


class PlacementExplanation(Response):
    """The whole answer: the workflow's copy shape, the policy, and each copy asked about."""

    workflow_id: str
    policy: Literal["pack", "spread"]
    nodes_per_copy: int = Field(ge=1)
    gpus_per_node: int = Field(ge=0)  # 0: a CPU engine
    min_gpu_memory_gb: Number  # each GPU's memory at least (the need over the engine's memory utilization)
    copies: list[CopyPlacement]


# --- routing ------------------------------------------------------------------------------------------------------
# Why a copy behind an endpoint does or does not get its requests, the first rule that turned it away in the order
# the routers apply them (berth/routing_rules.py, gateway/edge/routing.py `eligible`, traffic_split.py).
# outside_sites: under site_local, a copy in no site the endpoint may send to (issue 36).
RoutingVerdict = Literal["included", "not_ready", "draining", "outside_sites", "revision_weight_0", "not_in_litellm",
                         "scrape_failed", "metrics_stale"]


class CopyRouting(Response):
    """One copy behind the endpoint."""

    copy_id: str
    revision: int = Field(ge=1)
    verdict: RoutingVerdict
    detail: str  # one line: the figures behind the verdict
    # Its expected share of the endpoint's requests, percent: its revision's share over that revision's included
    # copies (exact under round_robin; under a load-aware policy, at equal load). None: excluded.
    share_percent: Number | None = None
    # Whether its scraped figures are fresh enough to route on; None: not recorded at the control plane (each
    # router scrapes the copies itself and keeps what it saw).
    metrics_fresh: bool | None = None


# Who picks the copy: the endpoint proxy, the pool's LiteLLM proxy (Proxy=true), or a service with no copies.
Router = Literal["endpoint_proxy", "litellm", "service"]


class RoutingExplanation(Response):
    """The whole answer: who routes the endpoint's requests, by which policy and split, and each copy."""

    endpoint_id: str
    workflow_id: str
    router: Router
    policy: str  # the routing policy's name (gateway/edge/routing.py POLICIES)
    # A rollout's split, revision → percent; None: every revision alike.
    weights: dict[int, int] | None = None
    # Each revision's share of the requests now, percent (the split over the revisions with an included copy).
    revision_shares: dict[int, Number]
    copies: list[CopyRouting]  # by copy id
    note: str | None = None  # what the answer cannot say (e.g. the routers' scrapes are not recorded)


# --- failure ------------------------------------------------------------------------------------------------------
class CopyEnd(Response):
    """One recorded end of a copy (or of the rank that ended it), as its pool recorded it. A field that is None
    was not recorded."""

    at: datetime | None = None
    kind: str  # the pool's event: copy_failed, copy_interrupted, copy_stopping, copy_dropped, copy_replaced, …
    reason: str  # the recorded line, as this reader may see it
    node: str | None = None
    rank: int | None = None
    exit_status: int | None = None
    signal: int | None = None


class RankLog(Response):
    """The last lines of one rank's log that this reader may see."""

    job: str  # vllm-rank-N
    rank: int | None = None
    node: str | None = None  # where that rank ran, as the pool lists the copy's nodes (None: not recorded)
    lines: list[str]


class CopyFailure(Response):
    """One copy: its status now, every end recorded for it, and its ranks' last log lines."""

    copy_id: str
    status: str | None = None  # as its pool lists it now; None: the pool no longer lists it
    detail: str | None = None
    nodes: list[str]  # its ranks' nodes, rank 0 first, as the pool lists them
    ends: list[CopyEnd]  # oldest first
    logs: list[RankLog]
    log_note: str | None = None  # why no log lines are shown, when none are


class FailureExplanation(Response):
    """The whole answer for a copy, or every copy of a workflow."""

    workflow_id: str
    phase: str | None = None  # the pool's phase; None: its record could not be read (see note)
    last_error: str | None = None
    copies: list[CopyFailure]
    note: str | None = None
