"""What every command shares: the API call (Berth's errors as one line and exit 1), `-o` handling, the
common options, and rendering (Rich tables for people, JSON for scripts).

Imports here and in every command module stay light (Typer, Rich, the standard library): `berth --help`
builds every command, and a command imports the client, the contracts and the settings it uses when it runs
(issue 33: `berth --help` took 0.5-0.6 s of CPU importing them all; docs/performance.md, "CLI start")."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, overload

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from berth.errors import BerthError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from berth.api_client import ApiClient
    from berth.api_transport import ApiTransport

T = TypeVar("T")
M = TypeVar("M", bound="BaseModel")
A = TypeVar("A", bound="ApiTransport")

console = Console()
errors = Console(stderr=True)
MAX_UNBROKEN_WORD = 48  # a table cell's word longer than this may be folded on a terminal
NATURAL_WIDTH_CAP = 10_000  # a piped table's widest row: no real listing comes near it


class Format(str, Enum):
    """`-o` choices."""

    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[Format, typer.Option("--output", "-o", help="table or json")]
StateDirOption = Annotated[Path | None,
                           typer.Option("--state-dir", help="State directory (default ~/.local/state/berth)")]


def fail(message: str, code: int = 1) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def api_client() -> type[ApiClient]:
    """The API client, imported when a command first calls the API (it imports every contract)."""
    from berth.api_client import ApiClient

    return ApiClient


@overload
def call(work: Callable[[ApiClient], Awaitable[T]]) -> T: ...
@overload
def call(work: Callable[[A], Awaitable[T]], api: type[A]) -> T: ...
def call(work: Callable[[Any], Awaitable[T]], api: type[ApiTransport] | None = None) -> T:
    """Run one API interaction; turn Berth errors into one clear line and a non-zero exit. `api`: one part
    of the client (`WorkflowsApi`) for a command that should import only its own contracts."""
    import asyncio

    from berth.settings import ClientConfig

    config = ClientConfig.load()
    client = api or api_client()

    async def runner() -> T:
        async with client(config.api_url, config.token, ca_file=config.ca_file) as connected:
            return await work(connected)

    try:
        return asyncio.run(runner())
    except BerthError as error:
        raise fail(str(error)) from None


@overload
def answer(output: Format, work: Callable[[ApiClient], Awaitable[T]]) -> T | None: ...
@overload
def answer(output: Format, work: Callable[[A], Awaitable[T]], api: type[A]) -> T | None: ...
def answer(output: Format, work: Callable[[Any], Awaitable[T]], api: type[ApiTransport] | None = None) -> T | None:
    """One API interaction for a command with `-o`: with `-o json` print its answer and return None (the
    command is done), else return the answer for the command to render."""
    result = call(work, api or api_client())
    if output is Format.JSON:
        emit_json(result)
        return None
    return result


Rows = list[dict[str, Any]]


@overload
def listing(output: Format, fetch: Callable[[ApiClient], Awaitable[list[M]]], columns: Sequence[tuple[str, str]],
            rows: Callable[[list[M]], Rows] | None = None) -> list[M] | None: ...
@overload
def listing(output: Format, fetch: Callable[[A], Awaitable[list[M]]], columns: Sequence[tuple[str, str]],
            rows: Callable[[list[M]], Rows] | None = None, *, api: type[A]) -> list[M] | None: ...
def listing(output: Format, fetch: Callable[[Any], Awaitable[list[M]]], columns: Sequence[tuple[str, str]],
            rows: Callable[[list[M]], Rows] | None = None, *, api: type[ApiTransport] | None = None
            ) -> list[M] | None:
    """The body of a listing command: fetch the items, then print them as JSON with `-o json`, else as a
    table of `rows(items)` (the items' fields as the API sent them by default). Returns the items when it
    printed a table, so that a command may add another below it."""
    items = answer(output, fetch, api or api_client())
    if items is not None:
        table(rows(items) if rows else [wire(item) for item in items], columns)
    return items


def resolve_state_dir(value: Path | None) -> Path:
    from berth.settings import default_state_dir

    return (value or default_state_dir()).resolve()


def emit_json(data: Any) -> None:
    """Print as JSON; a response model exactly as the API sent it (`wire`)."""
    sys.stdout.write(json.dumps(wire(data), indent=2, default=str) + "\n")


def wire(data: Any) -> Any:
    """berth.contracts.wire, imported when a command has an answer to print."""
    from berth.contracts.base import wire as contracts_wire

    return contracts_wire(data)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], title: str | None = None) -> None:
    """Through a pipe or into a file: every row whole, at its natural width (as kubectl prints), so that a
    script's `grep` and `awk` see whole cells. On a terminal: fitted to its width, folding between words;
    a word is broken only when it alone is wider than the terminal (issue 31: `simulato`/`r`)."""
    cells = [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    view = Table(title=title, show_lines=False, header_style="bold")
    for index, (_, heading) in enumerate(columns):
        longest = max([len(word) for line in cells for word in line[index].split()] + [len(heading)])
        view.add_column(heading, overflow="fold", min_width=min(longest, MAX_UNBROKEN_WORD),
                        no_wrap=not console.is_terminal)
    for line in cells:
        view.add_row(*line)
    if console.is_terminal:
        console.print(view)
    else:
        natural = Measurement.get(console, console.options.update_width(NATURAL_WIDTH_CAP), view).maximum
        Console(file=console.file, width=max(console.width, natural), color_system=None).print(view)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)
