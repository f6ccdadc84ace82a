"""`berth capacity`: free and total GPUs per node, per GPU model and in total (serving, reserved, free, available),
and which catalog entries would fit right now with their default values (docs/capacity.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from cli.common import Format, OutputOption, Rows, answer, console, table

if TYPE_CHECKING:
    from berth.contracts.capacity import Capacity, EntryFit, GpuFigures

# Registered without a name: `berth capacity`.
app = typer.Typer()


@app.command("capacity")
def capacity(output: OutputOption = Format.TABLE) -> None:
    """Show free and total GPUs per node and GPU model, and which catalog entries would fit now."""
    from berth.api_capacity import CapacityApi

    figures = answer(output, lambda api: api.capacity(), CapacityApi)
    if figures is None:
        return  # printed as JSON
    console.print(summary(figures), highlight=False)
    columns = [("free", "FREE/TOTAL GPUS"), ("memory", "FREE/TOTAL GB"), ("serving", "SERVING"),
               ("reserved", "RESERVED"), ("available", "AVAILABLE")]
    table(_node_rows(figures), [("id", "NODE"), ("state", "STATE"), *columns, ("taints", "TAINTS"),
                                ("copies", "COPIES")], title="Nodes")
    table(_model_rows(figures), [("name", "GPU"), ("size", "GB EACH"), ("nodes", "NODES"), *columns],
          title="GPU models")
    table([{"entry": fit.entry, "now": fit_text(fit), "values": fit.needs_values} for fit in figures.entries],
          [("entry", "ENTRY"), ("now", "WITH ITS DEFAULT VALUES, NOW"), ("values", "A START MUST GIVE")],
          title="Catalog entries")


def summary(figures: Capacity) -> str:
    total, states = figures.total, figures.node_states
    tainted = f" ({states.tainted} tainted)" if states.tainted else ""
    return (f"GPUs: {total.free} of {total.total} free ({total.free_memory_gb:g} of {total.memory_gb:g} GB), "
            f"{total.available} of them available to new copies now; {total.serving} serving, {total.reserved} "
            f"reserved. Nodes: {states.ready} ready{tainted}, {states.draining} draining, {states.offline} offline.")


def _figures(gpus: GpuFigures) -> dict[str, object]:
    return {"free": f"{gpus.free}/{gpus.total}", "memory": f"{gpus.free_memory_gb:g}/{gpus.memory_gb:g}",
            "serving": gpus.serving, "reserved": gpus.reserved, "available": gpus.available}


def _node_rows(figures: Capacity) -> Rows:
    return [{"id": node.id, "state": node.state, "taints": node.taints, "copies": node.copies, **_figures(node.gpus)}
            for node in figures.nodes]


def _model_rows(figures: Capacity) -> Rows:
    return [{"name": model.name or "(unnamed)", "size": f"{model.memory_gb:g}", "nodes": model.nodes,
             **_figures(model.gpus)} for model in figures.gpu_models]


def fit_text(fit: EntryFit) -> str:
    """`fits (node-1)`, or what it needs against what is available, or the scheduler's reason it never would."""
    if fit.fits:
        return f"fits ({', '.join(fit.placement)})"
    if not fit.placeable:
        return f"never fits on this cluster: {fit.reason}"
    if fit.gpus_per_node == 0:
        return f"does not fit now: {fit.reason}"
    gpus = f"{fit.gpus_per_node} GPU{'s' if fit.gpus_per_node > 1 else ''}"
    if fit.min_gpu_memory_gb:
        gpus += f" of ≥ {fit.min_gpu_memory_gb:g} GB"
    where = "on one node" if fit.nodes == 1 else f"on each of {fit.nodes} nodes"
    return f"does not fit now: needs {gpus} {where}, the most available on one node is {fit.most_available_on_a_node}"
