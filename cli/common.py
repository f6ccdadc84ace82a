"""What every command shares: the API call (Berth's errors as one line and exit 1), `-o` handling, the
common options; the rendering itself (tables for people, JSON for scripts, the error line) is cli/output.py's.

Imports here and in every command module stay light (Typer, Rich, the standard library): `berth --help`
builds every command, and a command imports the client, the contracts and the settings it uses when it runs
(issue 33: `berth --help` took 0.5-0.6 s of CPU importing them all; docs/performance.md, "CLI start")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, overload

import typer
from rich.console import Console

from berth.errors import BerthError
from cli.output import Format as Format  # re-exported, as table is
from cli.output import print_error, write_json
from cli.output import table as table  # re-exported: the commands take their helpers from here

if TYPE_CHECKING:
    from pydantic import BaseModel

    from berth.api_client import ApiClient
    from berth.api_transport import ApiTransport

T = TypeVar("T")
M = TypeVar("M", bound="BaseModel")
A = TypeVar("A", bound="ApiTransport")

console = Console()
errors = Console(stderr=True)


OutputOption = Annotated[Format, typer.Option("--output", "-o", help="table or json")]
StateDirOption = Annotated[Path | None,
                           typer.Option("--state-dir", help="State directory (default ~/.local/state/berth)")]


def fail(message: str, code: int = 1) -> typer.Exit:
    print_error(message)
    return typer.Exit(code)


def api_client() -> type[ApiClient]:
    """The API client, imported when a command first calls the API (it imports every contract)."""
    from berth.api_client import ApiClient

    return ApiClient


def client_settings() -> tuple[str, str | None, str | None]:
    """The API URL, token and CA file the CLI calls with. Plain strings as read (the usual case) are used as they
    are; anything else goes through berth.settings.ClientConfig, which coerces or refuses it (importing that module,
    its settings' models with it, cost every command ~50 ms of CPU: docs/performance.md, "CLI start")."""
    from berth.client_config import client_config_values, plain_client_values

    plain = plain_client_values(client_config_values())
    if plain is not None:
        return plain
    from berth.settings import ClientConfig

    config = ClientConfig.load()
    return config.api_url, config.token, config.ca_file


@overload
def call(work: Callable[[ApiClient], Awaitable[T]]) -> T: ...
@overload
def call(work: Callable[[A], Awaitable[T]], api: type[A]) -> T: ...
def call(work: Callable[[Any], Awaitable[T]], api: type[ApiTransport] | None = None) -> T:
    """Run one API interaction; turn Berth errors into one clear line and a non-zero exit. `api`: one part
    of the client (`WorkflowsApi`) for a command that should import only its own contracts."""
    import asyncio

    api_url, token, ca_file = client_settings()
    client = api or api_client()

    async def runner() -> T:
        async with client(api_url, token, ca_file=ca_file) as connected:
            return await work(connected)

    try:
        return asyncio.run(runner())
    except BerthError as error:
        raise fail(str(error)) from None


def poll(fetch: Callable[[ApiClient], Awaitable[M]], seen: Callable[[M], T | None], every_s: float,
         timeout_s: float) -> T | None:
    """Ask the API with `fetch` every `every_s` seconds until `seen`, shown each answer, returns something (the
    result) or `timeout_s` passes (None). One client and one connection for the whole wait: a client of its own for
    each question cost every poll a TLS context and an event loop (~20 ms of CPU; `--watch` polls twice a second)."""
    import asyncio
    import time

    async def polling(api: ApiClient) -> T | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = seen(await fetch(api))
            if result is not None:
                return result
            await asyncio.sleep(every_s)
        return None

    return call(polling)


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
    write_json(wire(data))


def wire(data: Any) -> Any:
    """berth.contracts.wire, imported when a command has an answer to print."""
    from berth.contracts.base import wire as contracts_wire

    return contracts_wire(data)
