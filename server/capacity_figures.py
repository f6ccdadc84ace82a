"""The capacity figures (`GET /v1/capacity`, docs/capacity.md): pure functions from the scheduler's node views, who
holds each GPU and which copies serve, to the Capacity contract; and whether each catalog entry would fit now, asked
of the scheduler itself (`place`, `rejection_reason`). No I/O: the route reads the store and the catalog."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from berth.contracts.capacity import (
    Capacity,
    EntryFit,
    GpuFigures,
    GpuModelCapacity,
    NodeCapacity,
    NodeCounts,
    NodeStateName,
)
from server import scheduler

Use = Literal["serving", "reserved", "free"]
# How the caller may see a copy's ID (server/access.py allocation_labels): another user's copy is not named.
Label = Callable[[str], str | None]


@dataclass(frozen=True)
class EntryDemand:
    """What one copy of a catalog entry asks for with its default values (server/capacity.py default_demand)."""

    entry: str
    demand: scheduler.Demand
    needs_values: tuple[str, ...] = ()  # required parameters with no default, rendered with stand-ins


@dataclass(frozen=True)
class GpuUse:
    """One GPU, what it does now, and whether a new copy could take it now."""

    node_id: str
    gpu: scheduler.GpuView
    use: Use
    available: bool


def gpu_uses(view: scheduler.NodeView, holders: Mapping[tuple[str, int], str],
             serving: Collection[str]) -> list[GpuUse]:
    """Each GPU of a node: serving (its copy is published ready), reserved (held, not serving: a copy starting or
    loading, unready, or fenced until its node confirms the process is gone) or free; available when free on a
    node that `place` would consider, and not a GPU placement skips (too hot, ECC errors: server/gpu_health.py)."""
    takes_copies = view.unavailable() is None
    uses = []
    for gpu in view.gpus:
        holder = holders.get((view.id, gpu.index))
        use: Use = "free" if holder is None else "serving" if holder in serving else "reserved"
        uses.append(GpuUse(view.id, gpu, use, takes_copies and use == "free" and gpu.unhealthy is None))
    return uses


def gpu_figures(uses: Iterable[GpuUse]) -> GpuFigures:
    every = list(uses)
    free = [gpu_use for gpu_use in every if gpu_use.use == "free"]
    available = [gpu_use for gpu_use in free if gpu_use.available]

    def memory_gb(members: list[GpuUse]) -> float:
        # Rounded: a sum of reported sizes such as 79.6 would otherwise print float noise.
        return round(sum(gpu_use.gpu.memory_gb for gpu_use in members), 1)

    return GpuFigures(total=len(every), serving=sum(gpu_use.use == "serving" for gpu_use in every),
                      reserved=sum(gpu_use.use == "reserved" for gpu_use in every), free=len(free),
                      available=len(available), memory_gb=memory_gb(every), free_memory_gb=memory_gb(free),
                      available_memory_gb=memory_gb(available))


def node_state(view: scheduler.NodeView) -> NodeStateName:
    """The state `berth node list` shows (a tainted node is ready: its taint is listed beside it)."""
    closed = view.unavailable()
    return "ready" if closed is None or closed == "tainted" else closed


def node_capacity(view: scheduler.NodeView, uses: list[GpuUse], holders: Mapping[tuple[str, int], str],
                  label: Label) -> NodeCapacity:
    held = {holders[(view.id, gpu.index)] for gpu in view.gpus if (view.id, gpu.index) in holders}
    copies = sorted({shown for shown in map(label, held) if shown is not None})
    return NodeCapacity(id=view.id, state=node_state(view), taints=list(view.taints), gpus=gpu_figures(uses),
                        copies=copies)


def by_gpu_model(uses: list[GpuUse]) -> list[GpuModelCapacity]:
    """One row per GPU model (name and memory: one name may come in two sizes), largest memory first."""
    models: dict[tuple[str, float], list[GpuUse]] = defaultdict(list)
    for gpu_use in uses:
        models[(gpu_use.gpu.name, gpu_use.gpu.memory_gb)].append(gpu_use)
    return [GpuModelCapacity(name=name, memory_gb=memory_gb, nodes=len({u.node_id for u in members}),
                             gpus=gpu_figures(members))
            for (name, memory_gb), members in sorted(models.items(), key=lambda item: (-item[0][1], item[0][0]))]


def node_counts(views: list[scheduler.NodeView]) -> NodeCounts:
    states = [node_state(view) for view in views]
    return NodeCounts(ready=states.count("ready"), draining=states.count("draining"), offline=states.count("offline"),
                      tainted=sum(1 for view in views if view.unavailable() == "tainted"))


def entry_fit(wanted: EntryDemand, views: list[scheduler.NodeView], max_nodes_per_copy: int,
              policy: scheduler.Policy) -> EntryFit:
    """Whether one copy would be placed now, and where: the scheduler's own answer (`place`), after its check for
    what no amount of waiting would place (`rejection_reason`, as a submission is refused)."""
    demand = wanted.demand
    never = scheduler.rejection_reason(demand, views, max_nodes_per_copy)
    decision = scheduler.place(demand, views, policy) if never is None else None
    placement = [node_id for node_id, _gpus in decision.ranks] if decision is not None else []
    min_gb = demand.min_gpu_memory_gb
    most_available = max((view.free_count(min_gb) for view in views if view.unavailable() is None), default=0)
    return EntryFit(entry=wanted.entry, nodes=demand.nodes, gpus_per_node=demand.gpus_per_node,
                    min_gpu_memory_gb=round(min_gb, 1), needs_values=list(wanted.needs_values),
                    fits=bool(placement), placement=placement, most_available_on_a_node=most_available,
                    placeable=never is None,
                    reason=never or (decision.blocked_reason if decision is not None else None))


def capacity(views: list[scheduler.NodeView], holders: Mapping[tuple[str, int], str], serving: Collection[str],
             label: Label, fits: list[EntryFit]) -> Capacity:
    """The whole answer: per node (by id), per GPU model, in total, and the entries' fits as given."""
    ordered = sorted(views, key=lambda view: view.id)
    uses = {view.id: gpu_uses(view, holders, serving) for view in ordered}
    every = [gpu_use for node_uses in uses.values() for gpu_use in node_uses]
    return Capacity(total=gpu_figures(every), node_states=node_counts(ordered),
                    nodes=[node_capacity(view, uses[view.id], holders, label) for view in ordered],
                    gpu_models=by_gpu_model(every), entries=fits)
