"""Following a workflow until it is ready or ends (`berth workflow watch`, `catalog start --watch`), and the
small renderings the workflow commands share."""

from __future__ import annotations

import time
from datetime import datetime

from berth.contracts import WorkflowEndpoint
from cli.common import call, console, fail


def watch(workflow_id: str, timeout_s: float = 3600) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    seen_events = 0
    phase = None
    progress: Progress | None = None
    task = None
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            info = call(lambda api: api.describe_workflow(workflow_id))
            events = info.events or []
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
                return
            if phase in ("failed", "stopped") or info.status in ("failed", "terminated", "completed"):
                raise fail(f"workflow {workflow_id} {phase}: {info.last_error or 'see berth workflow describe'}")
            time.sleep(0.5)
        raise fail(f"workflow {workflow_id} was not ready within {timeout_s:.0f} s; it keeps going — "
                   f"follow it with `berth workflow describe {workflow_id}`.")
    finally:
        if progress is not None:
            progress.stop()


def client_url(endpoint: WorkflowEndpoint) -> str:
    """The URL a client uses: the OpenAI base URL (…/v1), or the plain URL of an endpoint that is not an
    OpenAI API (OpenCode's server)."""
    return endpoint.url + ("" if endpoint.openai_compatible is False else "/v1")


def clock(value: datetime) -> str:
    return value.astimezone().strftime("%H:%M:%S")
