"""`berth events`: the cluster's event stream as you may see it (your workflows' and keys', those of workflows whose
scope includes you, every node's; an administrator: all), filtered by workflow, node, kind and time; `--follow`
keeps printing new events as they are recorded, polling with the stream's cursor (docs/events.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from berth.contracts.choices import MAX_EVENTS_PAGE
from cli.audit import since_time
from cli.common import Format, OutputOption, call, console, emit_json, fail, table

if TYPE_CHECKING:
    from berth.api_events import EventsApi
    from berth.contracts.events import EventPage, EventRecord

# Registered without a name: `berth events`.
app = typer.Typer()
COLUMNS = [("id", "ID"), ("when", "AT"), ("kind", "KIND"), ("subject", "SUBJECT"), ("message", "MESSAGE")]


@app.command("events")
def events(workflow: Annotated[str | None, typer.Option(help="One workflow's events")] = None,
           node: Annotated[str | None, typer.Option(help="One node's events")] = None,
           kind: Annotated[str | None, typer.Option(help="Kinds (copy.ready) or families (copy, node), "
                                                    "comma-separated")] = None,
           since: Annotated[str | None, typer.Option(help="Events since a duration ago (1h) or an ISO time (local "
                                                     "when it names no zone)")] = None,
           limit: Annotated[int, typer.Option(min=1, max=MAX_EVENTS_PAGE, help="The newest N events")] = 100,
           follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events; Ctrl-C ends")]
           = False,
           interval: Annotated[float, typer.Option(min=1.0, max=60.0, help="--follow: seconds between polls")] = 2.0,
           max_events: Annotated[int | None, typer.Option(min=1, help="--follow: end after this many events")]
           = None,
           output: OutputOption = Format.TABLE) -> None:
    """Show the cluster's events you may see, oldest first; with --follow, new ones as they come."""
    from berth.api_events import EventsApi
    from berth.contracts.events import event_kinds
    from berth.errors import UserInputError

    try:  # here, in one line, rather than as the API's pattern refusal
        event_kinds(kind)
    except UserInputError as error:
        raise fail(str(error)) from None
    # A Unix time on the wire: a duration or an ISO time read here, on your clock and in your zone (as `audit list`).
    start = f"{max(0.0, since_time(since)):.3f}" if since is not None else None
    filters: dict[str, Any] = {"workflow": workflow, "node": node, "kind": kind, "since": start}
    if not follow:
        page = call(lambda api: api.events(**filters, limit=limit), EventsApi)
        if output is Format.JSON:
            emit_json(page)
        else:
            table(rows(page), COLUMNS)
        return
    show = _json_line if output is Format.JSON else _line
    try:
        call(lambda api: follow_events(api, filters, show, limit=limit, interval_s=interval, max_events=max_events),
             EventsApi)
    except KeyboardInterrupt:
        return  # Ctrl-C is how a follow ends


async def follow_events(api: EventsApi, filters: dict[str, Any], show: Callable[[EventRecord], None], *,
                        limit: int = 100, interval_s: float = 2.0, max_events: int | None = None,
                        sleep: Callable[[float], Any] | None = None) -> int:
    """Show the newest `limit` events, then each new one as it is recorded, until `max_events` were shown (or
    forever). Polls with the cursor every `interval_s` (at once while a page comes back full). Events shown."""
    import asyncio

    pause = sleep or asyncio.sleep
    page = await api.events(**filters, limit=limit)
    shown = 0
    while True:
        for event in page.events:
            show(event)
            shown += 1
            if max_events is not None and shown >= max_events:
                return shown
        if not page.more:
            await pause(interval_s)
        page = await api.events(**filters, after=page.next_after, limit=MAX_EVENTS_PAGE)


def rows(page: EventPage) -> list[dict[str, object]]:
    from rich.markup import escape

    # Escaped: a message may quote a name a user chose, and Rich would read `[…]` in it as markup.
    return [{"id": event.id, "when": _when(event.at), "kind": event.kind.value, "subject": escape(subject(event)),
             "message": escape(event.message)} for event in page.events]


def subject(event: EventRecord) -> str:
    """What the event is about, most precise first: a copy, a node, a workflow, an endpoint."""
    return event.copy_id or event.node_id or event.workflow_id or event.endpoint_id or "-"


def _when(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


def _line(event: EventRecord) -> None:
    from rich.markup import escape

    console.print(escape(f"{_when(event.at)}  {event.kind.value:<18} {subject(event)}: {event.message}"),
                  highlight=False, soft_wrap=True)


def _json_line(event: EventRecord) -> None:
    """One JSON object a line (JSON Lines), flushed: a pipe reader gets each event as it comes."""
    sys.stdout.write(json.dumps(event.model_dump(mode="json")) + "\n")
    sys.stdout.flush()
