"""`berth console`: the web console's URL and a sign-in token for you, so a newcomer goes from `berth up` to
the browser without knowing where the client config keeps its token."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import call, console

if TYPE_CHECKING:
    from berth.api_client import ApiClient
    from berth.contracts.tokens import MintedToken

# Registered without a name: `berth console` is the root's.
app = typer.Typer()


@app.command("console")
def console_command(
    expiration: Annotated[str, typer.Option(help="Lifetime of the sign-in token")] = "8h",
) -> None:
    """Print the web console's URL and a fresh sign-in token for you (listed by `berth token list`)."""
    from berth.settings import ClientConfig

    async def mint(api: ApiClient) -> MintedToken:
        me = await api.whoami()
        return await api.user_token(me.name, expiration, note="console sign-in")

    minted = call(mint)
    console.print(f"Console  {ClientConfig.load().api_url}/ui  — paste this token on its sign-in page "
                  f"(it lapses in {expiration}; `berth token revoke {minted.id}` ends it sooner):",
                  highlight=False, soft_wrap=True)
    sys.stdout.write(minted.token + "\n")  # alone on its line, so `berth console | tail -1` is the token
