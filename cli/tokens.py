"""`berth token list|revoke`: the API tokens you (an administrator: anyone) hold, and revoking them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Format, OutputOption, call, console, emit_json, fail, table

if TYPE_CHECKING:
    from berth.api_client import ApiClient

app = typer.Typer(help="API tokens: list them, revoke one by id or all of a user's.", no_args_is_help=True)


def _when(value: float | None) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M") if value else "-"


@app.command("list")
def token_list(user: Annotated[str | None, typer.Option(help="One user's tokens (administrators)")] = None,
               output: OutputOption = Format.TABLE) -> None:
    """List API tokens (never the tokens themselves): yours, or everyone's for an administrator."""

    records = call(lambda api: api.tokens(user))
    if output is Format.JSON:
        # Every field, defaults included: what this command printed before the client was typed.
        emit_json([record.model_dump(mode="json") for record in records])
        return
    table([{**r.model_dump(mode="json"), "created": _when(r.created_at), "expires": _when(r.expires_at)}
           for r in records],
          [("id", "ID"), ("user", "USER"), ("kind", "KIND"), ("state", "STATE"), ("created", "CREATED"),
           ("expires", "EXPIRES"), ("note", "NOTE")])


@app.command("revoke")
def token_revoke(token_id: Annotated[str | None, typer.Argument(help="The token's id (`berth token list`)")] = None,
                 all_tokens: Annotated[bool, typer.Option("--all", help="Every token of --user")] = False,
                 user: Annotated[str | None, typer.Option(help="Whose tokens --all revokes (default: yours)")]
                 = None) -> None:
    """Revoke one API token by id, or with --all every token of a user (listed or not); refused at once."""
    if all_tokens == (token_id is not None):
        raise fail("Give exactly one of a token ID or --all [--user NAME].")
    if user is not None and not all_tokens:
        raise fail("--user goes with --all; a token ID names its user already.")

    async def revoke(api: ApiClient) -> tuple[list[str], str]:
        if token_id is not None:
            result = await api.revoke_token(token_id)
        else:
            result = await api.revoke_all_tokens(user or (await api.whoami()).name)
        return result.revoked, result.user or ""

    revoked, whose = call(revoke)
    if token_id is not None:
        console.print(f"Revoked token {token_id} of {whose}.", highlight=False)
    else:
        console.print(f"Revoked every API token of {whose} issued until now ({len(revoked)} listed).",
                      highlight=False)
