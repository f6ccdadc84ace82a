"""`berth workflow …`: follow, list, describe, scale, stop and read the logs of served models; the catalog
and the endpoints are its sub-groups."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from cli import catalog, endpoint, rollout, scaling
from cli.common import Format, OutputOption, answer, call, console, fail, listing, poll, table, wire
from cli.fast import workflow_list as fast_list
from cli.follow import client_url, clock, watch

if TYPE_CHECKING:
    from berth.contracts.workflows import WorkflowDescription

app = typer.Typer(help="Workflows: start, inspect and stop served models.", no_args_is_help=True)
app.add_typer(catalog.app, name="catalog")  # groups list after commands, whatever the order here
app.add_typer(endpoint.endpoints_app, name="endpoints")
app.command("explain-scaling")(scaling.explain_scaling)


@app.command("watch")
def workflow_watch(workflow_id: str) -> None:
    """Follow a workflow (events, download progress, phases) until it is ready or ends."""
    watch(workflow_id)


@app.command("list")
def workflow_list(output: OutputOption = Format.TABLE) -> None:
    """List workflows."""
    # `berth workflow list [-o …]` is answered by cli/fast/workflow_list.py without coming here (issue 33); this
    # is the path for a configuration that one leaves to pydantic and httpx, and for tests that drive the app.
    from berth.api_workflows import WorkflowsApi  # not the whole client: every contract would come with it

    listing(output, lambda api: api.workflows(), fast_list.COLUMNS,
            rows=lambda rows: [fast_list.table_row(wire(row)) for row in rows], api=WorkflowsApi)


@app.command("describe")
def workflow_describe(workflow_id: str, output: OutputOption = Format.TABLE) -> None:
    """Phase, replicas, endpoint, events and last error of a workflow."""
    info = answer(output, lambda api: api.describe_workflow(workflow_id))
    if info is None:
        return  # printed as JSON
    _describe(info)


# What the phase means for a caller, one line under it (a failed or stopped workflow is not "not ready yet").
READINESS = {
    "ready": "Ready: service running and health check passed.",
    "scaled_to_zero": "Scaled to zero: the next request wakes it.",
    "stopping": "Stopping: it takes no new requests.",
    "stopped": "Stopped: it serves nothing.",
    "failed": "Failed: it serves nothing; the last error below says why.",
}


def readiness(phase: str | None) -> str:
    return READINESS.get(phase or "", "Not ready yet.")


def _describe(info: WorkflowDescription) -> None:
    console.print(f"[bold]{info.id}[/] ({info.entry}) — phase [bold]{info.phase}[/], "
                  f"Temporal status {info.status}", highlight=False)
    console.print(f"  {readiness(info.phase)}")
    console.print(f"  Endpoint {info.endpoint.id}: {client_url(info.endpoint)}", highlight=False)
    if info.endpoint.note:
        console.print(f"  [yellow]{info.endpoint.note}[/]", highlight=False)
    download = info.download
    if download and download.bytes_total:
        done, total = download.bytes_done, download.bytes_total
        eta = f", ETA {download.eta_s:.0f} s" if download.eta_s else ""
        console.print(f"  Downloading: {done / 1e6:.0f}/{total / 1e6:.0f} MB ({100 * done / total:.0f}%), "
                      f"{download.rate_bps / 1e6:.1f} MB/s{eta}")
    if info.weights:
        w = info.weights
        console.print(f"  Weights: {w.model_dir}" + (" (cache hit)" if w.cache_hit else "")
                      + (" (dry run)" if w.dry_run else ""), highlight=False)
        if w.digest or w.model:
            console.print(f"  Model: {w.model or '-'}, digest sha256:{w.digest or '-'}", highlight=False)
    if info.revision is not None:
        console.print(f"  Revision {info.revision}" + _rollout_line(info), highlight=False)
    if info.copies:
        # The revision column only once a pool has had a rollout: the table keeps its width (and DETAIL its
        # words) for every other pool.
        revisions = [("revision", "REV")] if info.rollout is not None or (info.revision or 1) > 1 else []
        columns = [("copy_id", "COPY"), *revisions, ("status", "STATUS"), ("nodes", "NODES"), ("url", "URL"),
                   ("detail", "DETAIL")]
        table(wire(info.copies), columns, title=f"Replicas (desired {info.desired_copies})")
    if info.events:
        table([{**wire(e), "at": clock(e.at)} for e in info.events[-15:]],
              [("at", "TIME"), ("kind", "EVENT"), ("message", "MESSAGE")], title="Events")
    if info.last_error:
        console.print(f"[bold red]Last error:[/] {info.last_error}", highlight=False)
    if info.note:
        console.print(f"[yellow]{info.note}[/]")


def _rollout_line(info: WorkflowDescription) -> str:
    rollout = info.rollout
    if rollout is None:
        return ""
    split = ", ".join(f"rev {r}: {p} %" for r, p in sorted(rollout.traffic.items()))
    what = rollout.paused_reason or rollout.message
    return (f"; rollout {rollout.from_revision} → {rollout.to_revision} ({rollout.strategy.kind.value}) "
            f"{rollout.phase.value}" + (f": {what}" if what else "") + (f" [{split}]" if split else ""))


@app.command("get")
def workflow_get(workflow_id: str,
                 revision: Annotated[int | None, typer.Option("--revision", help="One revision's definition")] = None,
                 ) -> None:
    """Print the rendered workflow definition (owner only: it holds the API key)."""
    import yaml

    if revision is not None:
        shown = call(lambda api: api.workflow_revision(workflow_id, revision))
        sys.stdout.write(yaml.safe_dump(wire(shown), sort_keys=False))
        return
    data = call(lambda api: api.workflow_definition(workflow_id))
    sys.stdout.write(yaml.safe_dump(wire(data), sort_keys=False))


@app.command("scale")
def workflow_scale(workflow_id: str,
                   replicas: Annotated[int, typer.Option("--replicas", help="Copies the pool should run")],
                   output: OutputOption = Format.TABLE) -> None:
    """Set a replica pool's size (between MinReplicas and MaxReplicas); scale-in drains copies first."""
    result = answer(output, lambda api: api.scale_workflow(workflow_id, replicas))
    if result is None:
        return  # printed as JSON
    console.print(f"{workflow_id}: desired copies {result.previous} → {result.desired}.")


@app.command("stop")
def workflow_stop(workflow_id: str,
                  wait: Annotated[bool, typer.Option(help="Wait until every rank stopped")] = True) -> None:
    """Stop a workflow: ranks stopped, GPUs released, endpoint removed."""
    call(lambda api: api.stop_workflow(workflow_id))
    if not wait:
        console.print(f"Stop requested for {workflow_id}.")
        return
    stopped = poll(lambda api: api.describe_workflow(workflow_id),
                   lambda info: info if info.status != "running" else None, 0.5, 300)
    if stopped is not None:
        console.print(f"Stopped {workflow_id} ({stopped.phase}).")
        return
    raise fail(f"{workflow_id} is still stopping after 300 s; check `berth workflow describe {workflow_id}`.")


@app.command("log")
def workflow_log(workflow_id: str, job: Annotated[str | None, typer.Argument()] = None,
                 lines: Annotated[int, typer.Option()] = 200) -> None:
    """Print a job's log (e.g. vllm-rank-0); without JOB, list the jobs."""
    data = call(lambda api: api.workflow_log(workflow_id, job, lines))
    if job is None:
        console.print("Jobs: " + (", ".join(data.jobs or []) or "none yet"))
        return
    text = data.text or ""
    sys.stdout.write(text + ("\n" if text else ""))


rollout.register(app)  # update, revisions, drain and the rollout group (issue 17): listed after the rest
