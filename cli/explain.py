"""`berth explain placement|scaling|routing|failure ID`: why the scheduler placed a workflow's copies where it did (or
why it cannot, and what would change that), what the autoscaler last decided for a pool, which copies behind an
endpoint get its requests, and every recorded end of a copy (docs/explain.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import typer

from cli import scaling
from cli.common import Format, OutputOption, answer, console, table

if TYPE_CHECKING:
    from berth.api_explain import ExplainApi
    from berth.contracts.explain import (
        CopyEnd,
        CopyFailure,
        CopyPlacement,
        PlacementExplanation,
        RoutingExplanation,
        ScoreTerms,
    )

app = typer.Typer(help="Explain: why a workflow's copies are placed, scaled, routed to or ended as they are.",
                  no_args_is_help=True)
# The same command as `berth workflow explain-scaling`, which stays for the scripts and docs that name it.
app.command("scaling")(scaling.explain_scaling)

# How the human rendering names each node outcome (berth/contracts/explain.py NodeOutcome).
OUTCOMES = {"chosen": "chosen", "scored_lower": "passed, scored lower", "offline": "offline", "draining": "draining",
            "tainted": "tainted", "gpus_too_small": "GPUs too small", "gpus_unhealthy": "GPUs unhealthy",
            "busy": "too few free GPUs", "outside_sites": "outside its sites",
            "site_full": "site full (MaxCopiesPerSite)", "site_taken": "site holds one (MinSites)"}
# How it names each routing verdict (berth/contracts/explain.py RoutingVerdict).
VERDICTS = {"included": "included", "not_ready": "not ready", "draining": "draining",
            "outside_sites": "outside its sites",
            "revision_weight_0": "revision weight 0", "not_in_litellm": "not routed by LiteLLM",
            "scrape_failed": "failed scrape", "metrics_stale": "metrics stale"}
ROUTERS = {"endpoint_proxy": "the endpoint proxy", "litellm": "the pool's LiteLLM proxy", "service": "its service"}
NOT_RECORDED = "not recorded"
T = TypeVar("T")


def ask(output: Format, call: Callable[[ExplainApi], Awaitable[T]]) -> T | None:
    """One explain call: None once `-o json` printed the answer, else the answer to render."""
    from berth.api_explain import ExplainApi

    return answer(output, call, ExplainApi)


@app.command("placement")
def placement(target_id: str, output: OutputOption = Format.TABLE) -> None:
    """Where a workflow's copies (or one copy) are placed and why, or what would place a blocked one."""
    explanation = ask(output, lambda api: api.explain_placement(target_id))
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
    rows = [{"node": node.node, "outcome": OUTCOMES.get(node.outcome, node.outcome),
             "score": "" if node.score is None else score_line(node.score), "detail": node.detail}
            for node in copy.nodes]
    table(rows, [("node", "NODE"), ("outcome", "OUTCOME"), ("score", "SCORE"), ("detail", "DETAIL")])
    for line in copy.advice:
        console.print(f"  Would place it: {line}", highlight=False)


def score_line(score: ScoreTerms) -> str:
    """A node's score terms in the order the scheduler weighs them (the site terms only where they apply)."""
    sites = ""
    if score.preferred_site is not None:
        sites = (f"{'preferred site' if score.preferred_site else 'not the preferred site'}, "
                 f"{score.pool_copies_in_domain} of the pool's copies in its failure domain, ")
    return (f"#{score.order}: {sites}model {'on node' if score.model_on_node else 'not on node'}, "
            f"{score.free_gpus} free")


@app.command("routing")
def routing(endpoint_id: str, output: OutputOption = Format.TABLE) -> None:
    """Which copies behind an endpoint get its requests, and why the others do not."""
    explanation = ask(output, lambda api: api.explain_routing(endpoint_id))
    if explanation is None:
        return  # printed as JSON
    console.print(routing_headline(explanation), highlight=False)
    rows = [{"copy": copy.copy_id, "revision": copy.revision, "verdict": VERDICTS[copy.verdict],
             "share": "" if copy.share_percent is None else f"{copy.share_percent:g} %",
             "metrics": NOT_RECORDED if copy.metrics_fresh is None else "fresh" if copy.metrics_fresh else "stale",
             "detail": copy.detail} for copy in explanation.copies]
    table(rows, [("copy", "COPY"), ("revision", "REV"), ("verdict", "VERDICT"), ("share", "SHARE"),
                 ("metrics", "METRICS"), ("detail", "DETAIL")])
    if explanation.note:
        console.print(f"Note: {explanation.note}", highlight=False, markup=False)


def routing_headline(explanation: RoutingExplanation) -> str:
    split = ", ".join(f"revision {r}: {w} %" for r, w in sorted((explanation.weights or {}).items()))
    shares = ", ".join(f"revision {r}: {s:g} %" for r, s in explanation.revision_shares.items())
    return (f"[bold]{explanation.endpoint_id}[/] ({explanation.workflow_id}): routed by "
            f"{ROUTERS[explanation.router]}, policy {explanation.policy}"
            + (f"; traffic split {split}" if split else "") + (f"; shares now {shares}" if shares else "") + ".")


@app.command("failure")
def failure(target_id: str, output: OutputOption = Format.TABLE) -> None:
    """Every recorded end of a copy (or of each copy of a workflow), with its ranks' last log lines."""
    explanation = ask(output, lambda api: api.explain_failure(target_id))
    if explanation is None:
        return  # printed as JSON
    console.print(f"[bold]{explanation.workflow_id}[/]: phase {explanation.phase or NOT_RECORDED}"
                  + (f"; last error: {explanation.last_error}" if explanation.last_error else ""), highlight=False)
    if explanation.note:
        console.print(f"Note: {explanation.note}", highlight=False, markup=False)
    for copy in explanation.copies:
        show_failure(copy)


def end_line(end: CopyEnd) -> str:
    def shown(value: object) -> str:
        return NOT_RECORDED if value is None else str(value)

    when = end.at.astimezone().strftime("%Y-%m-%d %H:%M:%S") if end.at else NOT_RECORDED
    return (f"  {when} {end.kind}: {end.reason}\n    node {shown(end.node)}, rank {shown(end.rank)}, "
            f"exit status {shown(end.exit_status)}, signal {shown(end.signal)}")


def show_failure(copy: CopyFailure) -> None:
    status = copy.status or "no longer listed by its pool"
    nodes = ", ".join(copy.nodes) or NOT_RECORDED
    console.print(f"\n{copy.copy_id}: {status}; nodes {nodes}" + (f"; {copy.detail}" if copy.detail else ""),
                  highlight=False, markup=False)
    for end in copy.ends or []:
        console.print(end_line(end), highlight=False, markup=False)
    if not copy.ends:
        console.print("  No end recorded.", highlight=False)
    for log in copy.logs:
        where = f" (rank {log.rank} on {log.node or 'a node not recorded'})" if log.rank is not None else ""
        console.print(f"  Last lines of {log.job}{where}:", highlight=False, markup=False)
        for line in log.lines:
            console.print(f"    {line}", highlight=False, markup=False)
    if copy.log_note:
        console.print(f"  Logs: {copy.log_note}", highlight=False, markup=False)
