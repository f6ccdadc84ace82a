"""Explain contracts (`GET /v1/explain/placement/{id}`): where the scheduler put each copy of a workflow and why,
which filter turned every other node away, and for a copy it cannot place now the smallest change that would
place it. docs/explain.md says what each field means."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from berth.contracts.base import Number, Response

# What the scheduler made of one node for one copy (server/scheduler.py): chosen for a rank, passed every filter but
# scored below the chosen, or the first filter that turned it away (scheduler.Filter, in `place`'s order).
NodeOutcome = Literal["chosen", "scored_lower", "offline", "draining", "tainted", "gpus_too_small", "busy"]


class ScoreTerms(Response):
    """The terms of the scheduler's score for a node that passed every filter (server/scheduler.py `score`)."""

    model_on_node: bool  # the copy's volume or model digest is on the node: the cache hit, scored first
    free_gpus: int = Field(ge=0)  # free GPUs of the size asked for: fewer first under pack, more under spread
    order: int = Field(ge=1)  # its place among the nodes that passed (1: the scheduler's first choice)


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
