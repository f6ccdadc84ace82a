"""Who you are and who else there is: `berth login`, `berth user create|list`, `berth group create|add-member`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Format, OutputOption, answer, api_client, call, console, fail, listing, wire

if TYPE_CHECKING:
    from berth.contracts.identity import UserView

# Registered without a name: `berth login` is the root's.
app = typer.Typer()
user_app = typer.Typer(help="Users (administrators create them).", no_args_is_help=True)
group_app = typer.Typer(help="Groups (administrators create them and add members).", no_args_is_help=True)


@user_app.command("create")
def user_create(
    name: str,
    org: Annotated[str, typer.Option("--org", help="Organization")] = "default",
    group: Annotated[list[str] | None, typer.Option("--group", help="Group to join (repeatable)")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an administrator")] = False,
    output: OutputOption = Format.TABLE,
) -> None:
    """Create a user in an organization and groups (groups are created when missing)."""
    groups = list(group or [])
    user = answer(output, lambda api: api.create_user(name, org, groups, admin))
    if user is None:
        return  # printed as JSON
    console.print(f"Created user {user.name} (organization {user.org}, groups "
                  f"{', '.join(user.groups) or 'none'}).", highlight=False)


@user_app.command("list")
def user_list(output: OutputOption = Format.TABLE) -> None:
    """List users (administrators: all; others: their organization)."""
    listing(output, lambda api: api.users(),
            [("name", "USER"), ("org", "ORGANIZATION"), ("groups", "GROUPS"), ("admin", "ADMIN")],
            rows=lambda rows: [{**wire(r), "groups": ", ".join(r.groups)} for r in rows])


@group_app.command("create")
def group_create(name: str, org: Annotated[str, typer.Option("--org", help="Organization")] = "default") -> None:
    """Create a group in an organization."""
    call(lambda api: api.create_group(name, org))
    console.print(f"Created group {name} in organization {org}.", highlight=False)


@group_app.command("add-member")
def group_add_member(group: str, user: str) -> None:
    """Add a user to a group (tokens minted from now on carry it)."""
    identity = call(lambda api: api.add_member(group, user))
    console.print(f"{user} is now in {', '.join(identity.groups)}.", highlight=False)


@app.command()
def login(
    token: Annotated[str | None, typer.Option(help="An API token to use from now on")] = None,
    user: Annotated[str | None, typer.Option(help="Mint a token for this user (administrators)")] = None,
    expiration: Annotated[str, typer.Option(help="Lifetime of a minted token")] = "30d",
    api_url: Annotated[str | None, typer.Option(help="The control plane's URL")] = None,
    print_token: Annotated[bool, typer.Option("--print-token", help="Print the token instead of saving it")] = False,
) -> None:
    """Write the client config (API URL + token, mode 0600); BERTH_TOKEN still overrides it."""
    import asyncio

    from berth.errors import BerthError
    from berth.settings import ClientConfig

    config = ClientConfig.load()
    if api_url:
        config.api_url = api_url
    if (token is None) == (user is None):
        raise fail("Give exactly one of --token T or --user NAME.")
    if user is not None:
        minted = call(lambda api: api.user_token(user, expiration))
        token = minted.token
    assert token is not None

    async def check() -> UserView:
        async with api_client()(config.api_url, token, ca_file=config.ca_file) as api:
            return await api.whoami()

    try:
        who = asyncio.run(check())
    except BerthError as error:
        raise fail(f"The token was refused: {error}") from None
    if print_token:
        sys.stdout.write(token + "\n")
        return
    path = ClientConfig(api_url=config.api_url, token=token, ca_file=config.ca_file).save()
    console.print(f"Logged in as {who.name} (organization {who.org}, groups "
                  f"{', '.join(who.groups) or 'none'}); config written to {path}.", highlight=False)
