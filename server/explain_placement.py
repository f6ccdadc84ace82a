"""Explain placement (`GET /v1/explain/placement/{id}`, docs/explain.md): pure functions from the scheduler's node
views and one copy's demand to the CopyPlacement contract, asking the scheduler's own filters and score
(server/scheduler.py `first_filter`, `score`, `place`, `rejection_reason`) rather than restating them. No I/O: the
route reads the store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import get_args

from berth.contracts.explain import CopyPlacement, NodeOutcome, NodeVerdict, ScoreTerms
from berth.contracts.placement import SitePlacement
from server import scheduler
from server.site_placement import site_demand

# A copy's ranks as its reservation holds them: (node id, GPU indices), rank 0 first.
Ranks = Sequence[tuple[str, Sequence[int]]]
OUTCOME_ORDER = {outcome: position for position, outcome in enumerate(get_args(NodeOutcome))}


def freed(views: list[scheduler.NodeView], ranks: Ranks) -> list[scheduler.NodeView]:
    """The nodes as the scheduler would see them with this copy's own GPUs free again: a placed copy is judged as
    if it were placed now, not against the GPUs it holds itself."""
    held = {node_id: frozenset(gpus) for node_id, gpus in ranks}
    return [dataclasses.replace(view, busy_gpus=view.busy_gpus - held[view.id]) if view.id in held else view
            for view in views]


def skipped(view: scheduler.NodeView) -> str:
    """The node's GPUs placement skips and why ("GPU 3: 93 °C, over …"), or "" when it skips none."""
    return "; ".join(f"GPU {gpu.index}: {gpu.unhealthy}" for gpu in view.unhealthy_gpus())


def detail(view: scheduler.NodeView, demand: scheduler.Demand, outcome: NodeOutcome) -> str:
    """The figures behind a node's outcome, in one line, with the GPUs placement skips there named."""
    line = _figures(view, demand, outcome)
    unhealthy = skipped(view) if outcome not in ("offline", "draining", "tainted") else ""
    return f"{line}; skipped {unhealthy}" if unhealthy else line


def _figures(view: scheduler.NodeView, demand: scheduler.Demand, outcome: NodeOutcome) -> str:
    min_gb = demand.min_gpu_memory_gb
    size = f" of ≥ {min_gb:.0f} GB" if min_gb else ""
    if outcome == "offline":
        return "no heartbeat: its agent is not reporting"
    if outcome == "draining":
        return "draining: it keeps its copies and takes no new one"
    if outcome == "tainted":
        return f"tainted ({', '.join(view.taints)}): it takes no copy"
    if (outcome == "outside_sites" or outcome == "site_full" or outcome == "site_taken") and demand.sites is not None:
        return demand.sites.detail(outcome, view.site)
    if outcome == "gpus_too_small":
        return (f"{view.capable_gpus(min_gb)} of its {len(view.gpus)} GPU(s) are{size or ' usable'}, "
                f"the copy needs {demand.gpus_per_node} on one node")
    if outcome == "gpus_unhealthy":
        return (f"{view.healthy_gpus(min_gb)} of its {view.capable_gpus(min_gb)} GPU(s){size} are healthy, the copy "
                f"needs {demand.gpus_per_node} on one node")
    free = view.free_count(min_gb)
    if outcome == "busy":
        return f"{free} of its {view.capable_gpus(min_gb)} GPU(s){size} free now, the copy needs {demand.gpus_per_node}"
    return f"{free} GPU(s){size} free"


def verdicts(demand: scheduler.Demand, views: list[scheduler.NodeView], policy: scheduler.Policy,
             chosen: Ranks) -> list[NodeVerdict]:
    """Every node for one copy: the chosen (rank order) with their score terms, then the nodes that passed every
    filter but scored lower, then each other node with the first filter that turned it away."""
    min_gb = demand.min_gpu_memory_gb
    passed = sorted((scheduler.placement_key(view, view.free_count(min_gb), demand, policy), view) for view in views
                    if scheduler.first_filter(view, demand) is None)
    sited = demand.sites is not None
    terms = {view.id: ScoreTerms(model_on_node=key[2] == 0, free_gpus=view.free_count(min_gb), order=position,
                                 preferred_site=key[0] == 0 if sited else None,
                                 pool_copies_in_domain=key[1] if sited else None)
             for position, (key, view) in enumerate(passed, start=1)}
    ranks = {node_id: (rank, list(gpus)) for rank, (node_id, gpus) in enumerate(chosen)}
    found = []
    for view in views:
        rejected = scheduler.first_filter(view, demand)
        if view.id in ranks:
            rank, gpus = ranks[view.id]
            now = f"; now {rejected}: a new copy would not go here" if rejected else ""
            unhealthy = f"; skipped {skipped(view)}" if view.unhealthy_gpus() else ""
            found.append((rank, NodeVerdict(node=view.id, outcome="chosen", gpus=gpus, score=terms.get(view.id),
                                            detail=f"rank {rank}, GPUs {gpus}{now}{unhealthy}")))
            continue
        outcome: NodeOutcome = rejected or "scored_lower"
        found.append((len(ranks), NodeVerdict(node=view.id, outcome=outcome, gpus=[], score=terms.get(view.id),
                                              detail=detail(view, demand, outcome))))

    def order(item: tuple[int, NodeVerdict]) -> tuple[int, int, int, str]:
        rank, verdict = item
        place = verdict.score.order if verdict.score is not None else 0
        return rank, OUTCOME_ORDER[verdict.outcome], place, verdict.node

    return [verdict for _rank, verdict in sorted(found, key=order)]


def with_pool_sites(demand: scheduler.Demand, rules: SitePlacement | None, held: Mapping[str, Ranks],
                    views: list[scheduler.NodeView], copy_id: str | None) -> scheduler.Demand:
    """`demand` for one copy of a pool, with the pool's site rules and where its other copies (`held`, by copy id)
    are, as server/store/placement.py gives the scheduler when it places that copy."""
    by_id = {view.id: view for view in views}
    others = [[(node, by_id[node].site, by_id[node].failure_domain) for node, _gpus in ranks if node in by_id]
              for held_id, ranks in held.items() if held_id != copy_id]
    return dataclasses.replace(demand, sites=site_demand(rules, others))


def explain_placed(copy_id: str, ranks: Ranks, demand: scheduler.Demand, views: list[scheduler.NodeView],
                   policy: scheduler.Policy) -> CopyPlacement:
    """A copy holding its GPUs: its nodes, and whether the scheduler would place it again now (with its own GPUs
    counted free), and where every other node stands."""
    seen = freed(views, ranks)
    again = scheduler.place(demand, seen, policy)
    return CopyPlacement(copy_id=copy_id, placed=True, fits_now=again.blocked_reason is None,
                         blocked_reason=again.blocked_reason, nodes=verdicts(demand, seen, policy, ranks), advice=[])


def explain_unplaced(copy_id: str | None, demand: scheduler.Demand, views: list[scheduler.NodeView],
                     policy: scheduler.Policy, max_nodes_per_copy: int,
                     advise: Callable[[str | None], list[str]]) -> CopyPlacement:
    """A copy holding nothing (blocked, or the workflow's next one): what placing it now meets — the nodes the
    scheduler would choose, or why it would wait, and then `advise(never_reason)`: the smallest changes that
    would place it."""
    never = scheduler.rejection_reason(demand, views, max_nodes_per_copy)
    decision = scheduler.place(demand, views, policy) if never is None else scheduler.Decision(blocked_reason=never)
    fits = decision.blocked_reason is None
    return CopyPlacement(copy_id=copy_id, placed=False, fits_now=fits, blocked_reason=decision.blocked_reason,
                         never_reason=never, nodes=verdicts(demand, views, policy, decision.ranks),
                         advice=[] if fits else advise(never))


def under_quota(placement: CopyPlacement, refusal: str | None) -> CopyPlacement:
    """An unplaced copy as the placement meets it when a quota refuses it (`refusal`, its line; None: none does):
    the quota is checked before the nodes, so the nodes that would take it read "quota", and it waits whatever they
    have free. A placed copy already counts in the quota: it is left as it is."""
    if refusal is None or placement.placed:
        return placement
    nodes = [verdict.model_copy(update={"outcome": "quota", "detail": refusal, "gpus": []})
             if verdict.outcome in ("chosen", "scored_lower") else verdict for verdict in placement.nodes]
    advice = [f"{refusal.rstrip('.')}: stop or scale in a workflow that policy counts, or ask an administrator to "
              "raise it (`berth policy show`)", *placement.advice]
    return placement.model_copy(update={"fits_now": False, "blocked_reason": refusal, "nodes": nodes,
                                        "advice": advice})
