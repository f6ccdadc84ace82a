"""The smallest changes that would place a copy the scheduler cannot place now (`berth explain placement`): fewer GPUs
per node, a smaller context, or a node that would take it once something there frees. Each is asked of the scheduler
itself (`place`) and of the catalog's memory model (catalog/memory.py); a copy no waiting would place gets the
submission's own advice (server/capacity.py `what_would_fit`). Pure: no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from catalog.definition import ReplicaSpec
from catalog.entry import Entry, ModelFacts
from catalog.memory import max_context_that_fits, memory_need
from server import scheduler
from server.capacity import names, what_would_fit

MAX_NODE_LINES = 3  # nodes named as "would take it once …": the nearest to fitting; more is noise


@dataclass(frozen=True)
class Blocked:
    """A copy the scheduler cannot place now, and what the advice may change about it."""

    demand: scheduler.Demand
    replica: ReplicaSpec
    entry: Entry | None  # its catalog entry, when the catalog still has it
    views: list[scheduler.NodeView]
    policy: scheduler.Policy
    max_nodes_per_copy: int
    holders: Mapping[str, Sequence[str]]  # node id → the copies holding its GPUs, as the caller may see them

    @property
    def facts(self) -> ModelFacts | None:
        return self.entry.model if self.entry is not None else None


def advice(blocked: Blocked, never_reason: str | None) -> list[str]:
    """One line per change that would place the copy, smallest first."""
    if never_reason is not None:
        if blocked.entry is None:
            return []
        text = what_would_fit(blocked.entry, blocked.replica, blocked.views, blocked.max_nodes_per_copy).strip()
        return [text] if text else []
    lines = [line for line in (_fewer_gpus(blocked), _smaller_context(blocked)) if line]
    return lines + _once_freed(blocked) + _once_healthy(blocked)


def _placed_on(blocked: Blocked, trial: scheduler.Demand) -> list[scheduler.NodeView]:
    ranks = scheduler.place(trial, blocked.views, blocked.policy).ranks
    chosen = {node_id for node_id, _gpus in ranks}
    return [view for view in blocked.views if view.id in chosen]


def _fewer_gpus(blocked: Blocked) -> str | None:
    """The most GPUs per node below the copy's that place it now, its memory need spread over them."""
    demand, facts = blocked.demand, blocked.facts
    if facts is None:  # the general entry has no memory model: its need on fewer GPUs is unknown
        return None
    need_gb = memory_need(facts, blocked.replica.engine.max_model_len).total_gb
    for gpus in range(demand.gpus_per_node - 1, 0, -1):
        # As the catalog's template spreads the need (catalog/_shared/model-workflow.yaml.j2): rounded per GPU.
        trial = dataclasses.replace(demand, gpus_per_node=gpus, gpu_memory_gb=round(need_gb / (demand.nodes * gpus), 1))
        nodes = _placed_on(blocked, trial)
        if nodes:
            return (f"GpusPerNode={gpus} (each GPU ≥ {trial.min_gpu_memory_gb:.0f} GB) would place it now on "
                    f"{names(nodes)}")
    return None


def _smaller_context(blocked: Blocked) -> str | None:
    """The largest MaxContextSize below the copy's that places it now on the same number of GPUs."""
    demand, facts, engine = blocked.demand, blocked.facts, blocked.replica.engine
    if facts is None or demand.gpus_per_node == 0:
        return None
    gpus = demand.nodes * demand.gpus_per_node
    sizes = {gpu.memory_gb for view in blocked.views if view.unavailable() is None for gpu in view.gpus}
    contexts = {max_context_that_fits(facts, gpus, size, engine.gpu_memory_utilization) for size in sizes}
    for context in sorted((c for c in contexts if c is not None and c < engine.max_model_len), reverse=True):
        trial = dataclasses.replace(demand, gpu_memory_gb=round(memory_need(facts, context).total_gb / gpus, 1))
        nodes = _placed_on(blocked, trial)
        if nodes:
            return f"MaxContextSize={context} would place it now on {names(nodes)}"
    return None


def _once_freed(blocked: Blocked) -> list[str]:
    """Nodes with GPUs large enough that are busy or draining now: the nearest to fitting first."""
    demand = blocked.demand
    min_gb = demand.min_gpu_memory_gb
    what = "it" if demand.nodes == 1 else "a rank"
    waiting = [view for view in blocked.views if scheduler.first_filter(view, demand) in ("busy", "draining")
               and view.capable_gpus(min_gb) >= demand.gpus_per_node]
    waiting.sort(key=lambda view: (view.draining, demand.gpus_per_node - view.free_count(min_gb), view.id))
    lines = []
    for view in waiting[:MAX_NODE_LINES]:
        if view.draining:
            busy = "" if view.free_count(min_gb) >= demand.gpus_per_node else " and the copies on it end"
            lines.append(f"{view.id} would take {what} once an administrator undrains it (`berth node undrain "
                         f"{view.id}`){busy}")
            continue
        short = demand.gpus_per_node - view.free_count(min_gb)
        held = ", ".join(blocked.holders.get(view.id, ())) or "copies being released"
        lines.append(f"{view.id} would take {what} once {short} more of its GPUs free (held by {held})")
    return lines


def _once_healthy(blocked: Blocked) -> list[str]:
    """Nodes turned away only because placement skips GPUs there (server/gpu_health.py): what would make them fit."""
    demand = blocked.demand
    what = "it" if demand.nodes == 1 else "a rank"
    lines: list[str] = []
    for view in blocked.views:
        if len(lines) == MAX_NODE_LINES:
            break
        if scheduler.first_filter(view, demand) == "gpus_unhealthy":
            skipped = [str(gpu.index) for gpu in view.unhealthy_gpus()]
            gpus = f"GPU {skipped[0]} is" if len(skipped) == 1 else f"GPUs {', '.join(skipped)} are"
            lines.append(f"{view.id} would take {what} once its {gpus} healthy again (cooler than the cluster's "
                         "max_gpu_temp_c; a GPU reset clears ECC errors)")
    return lines
