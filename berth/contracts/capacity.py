"""Capacity contracts (`GET /v1/capacity`): what the cluster's GPUs are doing now, per node, per GPU model and in
total, and which catalog entries would fit right now with their default values. docs/capacity.md says what each
figure means."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from berth.contracts.base import Number, Response

# A node's state as `berth node list` names it (server/store/database.py Store.node_state).
NodeStateName = Literal["ready", "draining", "offline"]


class GpuFigures(Response):
    """GPUs counted by what they do now: serving + reserved + free = total. Memory in GB (1e9 bytes)."""

    total: int = Field(ge=0)
    serving: int = Field(ge=0)  # held by a copy published ready
    reserved: int = Field(ge=0)  # held by a copy placed but not serving: starting, loading, unready or fenced
    free: int = Field(ge=0)  # held by no copy (idle), as the scheduler and `berth_node_gpus` count free
    available: int = Field(ge=0)  # free on a node that takes new copies now (ready, not draining, untainted)
    memory_gb: Number  # of the `total` GPUs
    free_memory_gb: Number  # of the `free` GPUs
    available_memory_gb: Number  # of the `available` GPUs


class NodeCapacity(Response):
    """One node: its state, taints, GPU figures and the copies holding its GPUs."""

    id: str
    state: NodeStateName
    taints: list[str]
    gpus: GpuFigures
    # The copies holding its GPUs, as the caller may see them: another user's copy reads "(another user)".
    copies: list[str]


class GpuModelCapacity(Response):
    """One GPU model (its name as the node agents report it, and its memory) across the nodes that have it."""

    name: str
    memory_gb: Number  # each GPU's
    nodes: int = Field(ge=0)  # how many nodes have at least one
    gpus: GpuFigures


class NodeCounts(Response):
    """How many nodes are in each state; `tainted` counts ready nodes with a taint (they take no copy either)."""

    ready: int = Field(ge=0)
    draining: int = Field(ge=0)
    offline: int = Field(ge=0)
    tainted: int = Field(ge=0)


class EntryFit(Response):
    """Whether one copy of a catalog entry, with its default values, would be placed right now, as the scheduler
    would place it."""

    entry: str
    nodes: int = Field(ge=1)  # ranks, one per node
    gpus_per_node: int = Field(ge=0)  # 0: a CPU engine
    min_gpu_memory_gb: Number  # each GPU's memory at least (its need over the engine's memory utilization)
    needs_values: list[str]  # parameters the entry requires and has no default for: a start must give them
    fits: bool  # placed now, on `placement`
    placement: list[str]  # the nodes the scheduler would choose now, one per rank (empty when it does not fit)
    most_available_on_a_node: int = Field(ge=0)  # the most available GPUs of ≥ min_gpu_memory_gb on one node
    # False: no amount of waiting places it on this cluster as it is (too few nodes with GPUs that large).
    placeable: bool
    reason: str | None = None  # the scheduler's one line when it does not fit now


class Capacity(Response):
    """The whole answer of `GET /v1/capacity`: the same figures for every caller; the entries the caller may
    start."""

    total: GpuFigures
    node_states: NodeCounts
    nodes: list[NodeCapacity]  # by id
    gpu_models: list[GpuModelCapacity]  # largest memory first, then by name
    entries: list[EntryFit]  # entries that place a model copy, in catalog order
