"""`berth explain placement|scaling ID`: why the scheduler placed a workflow's copies where it did (or why it cannot,
and what would change that), and what the autoscaler last decided for a pool (docs/explain.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from cli import scaling
from cli.common import Format, OutputOption, answer, console, table

if TYPE_CHECKING:
    from berth.contracts.explain import CopyPlacement, PlacementExplanation

app = typer.Typer(help="Explain: why a workflow's copies are placed, or scaled, as they are.", no_args_is_help=True)
# The same command as `berth workflow explain-scaling`, which stays for the scripts and docs that name it.
app.command("scaling")(scaling.explain_scaling)

# How the human rendering names each node outcome (berth/contracts/explain.py NodeOutcome).
OUTCOMES = {"chosen": "chosen", "scored_lower": "passed, scored lower", "offline": "offline", "draining": "draining",
            "tainted": "tainted", "gpus_too_small": "GPUs too small", "busy": "too few free GPUs"}


@app.command("placement")
def placement(target_id: str, output: OutputOption = Format.TABLE) -> None:
    """Where a workflow's copies (or one copy) are placed and why, or what would place a blocked one."""
    from berth.api_explain import ExplainApi

    explanation = answer(output, lambda api: api.explain_placement(target_id), ExplainApi)
    if explanation is None:
        return  # printed as JSON
    console.print(headline(explanation), highlight=False)
    for copy in explanation.copies:
        show_copy(copy)


def headline(explanation: PlacementExplanation) -> str:
    memory = f" of ≥ {explanation.min_gpu_memory_gb:g} GB" if explanation.min_gpu_memory_gb else ""
    return (f"[bold]{explanation.workflow_id}[/]: each copy takes {explanation.nodes_per_copy} node(s) × "
            f"{explanation.gpus_per_node} GPU(s){memory}; placement policy {explanation.policy}.")


def status(copy: CopyPlacement) -> str:
    """One line: placed, placed now on the next try, waiting, or never placed as things are."""
    name = copy.copy_id or "Next copy (a blocked copy's next try, or a scale-out)"
    chosen = ", ".join(node.node for node in copy.nodes if node.outcome == "chosen")
    if copy.placed:
        again = "" if copy.fits_now else f"; it would not be placed again now: {copy.blocked_reason}"
        return f"{name}: placed on {chosen}{again}"
    if copy.fits_now:
        return f"{name}: not placed; placed now it would go to {chosen}"
    if copy.never_reason:
        return f"{name}: never placed on this cluster as it is: {copy.never_reason}"
    return f"{name}: not placed: {copy.blocked_reason}"


def show_copy(copy: CopyPlacement) -> None:
    console.print(f"\n{status(copy)}", highlight=False)
    rows = [{"node": node.node, "outcome": OUTCOMES[node.outcome],
             "score": "" if node.score is None else
             f"#{node.score.order}: model {'on node' if node.score.model_on_node else 'not on node'}, "
             f"{node.score.free_gpus} free", "detail": node.detail} for node in copy.nodes]
    table(rows, [("node", "NODE"), ("outcome", "OUTCOME"), ("score", "SCORE"), ("detail", "DETAIL")])
    for line in copy.advice:
        console.print(f"  Would place it: {line}", highlight=False)
