"""`berth secret create|list|delete`: typed values that entries reference as secret://user|group|organization/NAME."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli.common import Format, OutputOption, call, console, fail, listing

app = typer.Typer(help="Secrets: typed values referenced as secret://user|group|organization/NAME.",
                  no_args_is_help=True)


@app.command("create")
def secret_create(
    ref: Annotated[str, typer.Argument(help="secret://user/NAME (or group/organization)")],
    value: Annotated[str | None, typer.Argument(help='For --type hf: \'{"token":"hf_…"}\'')] = None,
    kind: Annotated[str, typer.Option("--type", help="hf or value (value: read from standard input)")] = "value",
) -> None:
    """Create or replace a secret. Values never appear in listings or logs."""
    if value is None:
        if sys.stdin.isatty():
            raise fail("Give the value as an argument, or pipe it on standard input "
                       "(printf 'sk-…' | berth secret create …).")
        value = sys.stdin.read().rstrip("\n")
    created = call(lambda api: api.create_secret(ref, kind, value))
    console.print(f"Created {ref} (type {created.type}).", highlight=False)


@app.command("list")
def secret_list(output: OutputOption = Format.TABLE) -> None:
    """List the secrets you can use (names and types, never values)."""
    listing(output, lambda api: api.secrets(),
            [("ref", "SECRET"), ("type", "TYPE"), ("scope", "SCOPE"), ("owner", "OWNER"),
             ("created_by", "CREATED BY")])


@app.command("delete")
def secret_delete(ref: str) -> None:
    """Delete a secret."""
    call(lambda api: api.delete_secret(ref))
    console.print(f"Deleted {ref}.", highlight=False)
