"""Following a workflow until it is ready or ends (`berth workflow watch`, `catalog start --watch`), a model
until its job ends (`berth model status --watch`), and the small renderings the workflow commands share."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from cli.common import console, fail, poll

if TYPE_CHECKING:
    from berth.contracts.model_registry import ModelRecord
    from berth.contracts.workflows import WorkflowDescription, WorkflowEndpoint


def watch(workflow_id: str, timeout_s: float = 3600) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    seen_events = 0
    phase = None
    progress: Progress | None = None
    task = None

    def seen(info: WorkflowDescription) -> bool | None:
        nonlocal seen_events, phase, progress, task
        events = info.events or ()
        for event in events[seen_events:]:
            console.print(f"  [dim]{clock(event.at)}[/] {event.kind}: {event.message}", highlight=False)
        seen_events = len(events)
        download = info.download
        if download and download.bytes_total:
            if progress is None:
                progress = Progress("  downloading", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                    TimeRemainingColumn(), console=console, transient=True)
                progress.start()
                task = progress.add_task("weights", total=download.bytes_total)
            assert task is not None
            progress.update(task, completed=download.bytes_done, total=download.bytes_total)
        elif progress is not None and info.phase != "downloading":
            progress.stop()
            progress = None
        if info.phase != phase:
            phase = info.phase
            console.print(f"[bold]{phase}[/]")
        if phase == "ready":
            console.print(f"[bold green]Ready.[/] Endpoint: {client_url(info.endpoint)} "
                          f"(ID {info.endpoint.id})", highlight=False)
            return True
        if phase in ("failed", "stopped") or info.status in ("failed", "terminated", "completed"):
            raise fail(f"workflow {workflow_id} {phase}: {info.last_error or 'see berth workflow describe'}")
        return None

    try:
        if poll(lambda api: api.describe_workflow(workflow_id), seen, 0.5, timeout_s) is None:
            raise fail(f"workflow {workflow_id} was not ready within {timeout_s:.0f} s; it keeps going — "
                       f"follow it with `berth workflow describe {workflow_id}`.")
    finally:
        if progress is not None:
            progress.stop()


def watch_model(name: str, timeout_s: float = 3600, quiet: bool = False) -> ModelRecord:
    """Follow a model's job: each state as it comes, a progress line (bytes, the node's rate and ETA) while
    it downloads; the Ready record, or exit 1 with the job's message when it fails. `quiet`: print nothing."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from berth.contracts.model_registry import ModelState

    state: ModelState | None = None
    progress: Progress | None = None
    task = None

    def seen(record: ModelRecord) -> ModelRecord | None:
        nonlocal state, progress, task
        if record.state != state and not quiet:
            state = record.state
            console.print(f"[bold]{state.value}[/]", highlight=False)
        done = record.progress
        if done and done.bytes_total and record.state is ModelState.DOWNLOADING and not quiet:
            if progress is None:
                progress = Progress("  downloading", BarColumn(), DownloadColumn(),
                                    TextColumn("{task.fields[rate]}, ETA {task.fields[eta]}"),
                                    console=console, transient=True)
                progress.start()
                task = progress.add_task("weights", total=done.bytes_total, rate="-", eta="-")
            assert task is not None
            eta = f"{done.eta_s:.0f} s" if done.eta_s is not None else "-"
            progress.update(task, completed=done.bytes_done, total=done.bytes_total,
                            rate=f"{done.rate_bps / 1e6:.1f} MB/s", eta=eta)
        elif progress is not None and record.state is not ModelState.DOWNLOADING:
            progress.stop()
            progress = None
        if record.state is ModelState.READY:
            if not quiet:
                console.print(f"[bold green]Ready.[/] {record.name}: digest {record.digest}", highlight=False)
            return record
        if record.state is ModelState.FAILED:
            raise fail(f"model {record.name} failed: {record.message or 'see berth model describe'}")
        if record.state is ModelState.REGISTERED and record.job_id is None:
            raise fail(f"model {record.name} has no job; start one with `berth model materialize {name}`.")
        return None

    try:
        ready = poll(lambda api: api.model_status(name), seen, 0.5, timeout_s)
        if ready is None:
            raise fail(f"model {name} was not Ready within {timeout_s:.0f} s; its job keeps going — follow it "
                       f"with `berth model status {name} --watch`.")
        return ready
    finally:
        if progress is not None:
            progress.stop()


def client_url(endpoint: WorkflowEndpoint) -> str:
    """The URL a client uses: the OpenAI base URL (…/v1), or the plain URL of an endpoint that is not an
    OpenAI API (OpenCode's server)."""
    return endpoint.url + ("" if endpoint.openai_compatible is False else "/v1")


def clock(value: datetime) -> str:
    return value.astimezone().strftime("%H:%M:%S")
