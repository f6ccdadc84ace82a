"""What every command shares: the API call (Berth's errors as one line and exit 1), `-o` handling, the
common options, and rendering (Rich tables for people, JSON for scripts)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from berth.api_client import ApiClient
from berth.contracts import wire
from berth.errors import BerthError
from berth.settings import ClientConfig, default_state_dir

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

console = Console()
errors = Console(stderr=True)


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


def call(work: Callable[[ApiClient], Awaitable[T]]) -> T:
    """Run one API interaction; turn Berth errors into one clear line and a non-zero exit."""
    config = ClientConfig.load()

    async def runner() -> T:
        async with ApiClient(config.api_url, config.token, ca_file=config.ca_file) as api:
            return await work(api)

    try:
        return asyncio.run(runner())
    except BerthError as error:
        raise fail(str(error)) from None


def answer(output: Format, work: Callable[[ApiClient], Awaitable[T]]) -> T | None:
    """One API interaction for a command with `-o`: with `-o json` print its answer and return None (the
    command is done), else return the answer for the command to render."""
    result = call(work)
    if output is Format.JSON:
        emit_json(result)
        return None
    return result


Rows = list[dict[str, Any]]


def listing(output: Format, fetch: Callable[[ApiClient], Awaitable[list[M]]], columns: Sequence[tuple[str, str]],
            rows: Callable[[list[M]], Rows] | None = None) -> list[M] | None:
    """The body of a listing command: fetch the items, then print them as JSON with `-o json`, else as a
    table of `rows(items)` (the items' fields as the API sent them by default). Returns the items when it
    printed a table, so that a command may add another below it."""
    items = answer(output, fetch)
    if items is not None:
        table(rows(items) if rows else [wire(item) for item in items], columns)
    return items


def resolve_state_dir(value: Path | None) -> Path:
    return (value or default_state_dir()).resolve()


def emit_json(data: Any) -> None:
    """Print as JSON; a response model exactly as the API sent it (`wire`)."""
    sys.stdout.write(json.dumps(wire(data), indent=2, default=str) + "\n")


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], title: str | None = None) -> None:
    view = Table(title=title, show_lines=False, header_style="bold")
    for _, heading in columns:
        view.add_column(heading, overflow="fold")
    for row in rows:
        view.add_row(*(_cell(row.get(key)) for key, _ in columns))
    console.print(view)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)
