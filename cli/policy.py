"""`berth policy set|show|list|remove`: what a user, group or organization may deploy (allow-lists of catalog entries
and model sources, deploy hours in UTC) and how many GPUs and copies its workflows may hold (docs/policies.md).
Setting and removing are administrators'; anyone lists and shows the policies that bind them."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Format, OutputOption, Rows, answer, console, listing

if TYPE_CHECKING:
    from berth.contracts.policies import Policy

app = typer.Typer(help="Policies and quotas per user, group or organization.", no_args_is_help=True)


class Kind(str, Enum):
    """Whom a policy binds (berth.contracts.policies.PolicyKind)."""

    USER = "user"
    GROUP = "group"
    ORGANIZATION = "organization"


KindArgument = Annotated[Kind, typer.Argument(help="user, group or organization")]
NameArgument = Annotated[str, typer.Argument(help="The user's, group's or organization's name")]
COLUMNS = [("policy", "POLICY"), ("entries", "ENTRIES"), ("sources", "MODEL SOURCES"), ("hours", "DEPLOY HOURS (UTC)"),
           ("gpus", "GPUS IN USE/MAX"), ("copies", "COPIES IN USE/MAX"), ("set", "SET BY")]


@app.command("set")
def set_policy(kind: KindArgument, name: NameArgument,
               entry: Annotated[list[str] | None, typer.Option(
                   "--entry", help="A catalog entry it may start (repeat; none given: any entry)")] = None,
               model_source: Annotated[list[str] | None, typer.Option(
                   "--model-source", help="A prefix its models' sources must start with, e.g. hf://meta-llama/ "
                                          "(repeat; none given: any model)")] = None,
               deploy_hours: Annotated[str | None, typer.Option(
                   help="START-END in UTC, e.g. 08-18 or 22:00-06:00 (wraps past midnight); none: any hour")] = None,
               max_gpus: Annotated[int | None, typer.Option(help="GPUs its workflows' copies may hold at once")] = None,
               max_copies: Annotated[int | None, typer.Option(help="Copies its workflows may hold at once")] = None,
               output: OutputOption = Format.TABLE) -> None:
    """Set (replace) a policy: each rule left out allows anything. Administrators only."""
    from pydantic import ValidationError

    from berth.api_policies import PoliciesApi
    from berth.contracts.policies import PolicyRules

    try:
        rules = PolicyRules(entries=entry or None, model_sources=model_source or None, deploy_hours=deploy_hours,
                            max_gpus=max_gpus, max_copies=max_copies)
    except ValidationError as error:  # its first problem, in one line, before anything is sent
        raise typer.BadParameter(str(error.errors()[0]["msg"])) from None
    policy = answer(output, lambda api: api.set_policy(kind.value, name, rules), PoliciesApi)
    if policy is not None:
        console.print(f"Set policy {policy.kind}/{policy.name}: {describe(policy)}", highlight=False, soft_wrap=True)


@app.command("show")
def show(kind: KindArgument, name: NameArgument, output: OutputOption = Format.TABLE) -> None:
    """Show one policy that binds you (an administrator: any), with what it counts in use now."""
    from berth.api_policies import PoliciesApi

    policy = answer(output, lambda api: api.policy(kind.value, name), PoliciesApi)
    if policy is not None:
        console.print(f"{policy.kind}/{policy.name}: {describe(policy)} (set by {policy.set_by})", highlight=False,
                      soft_wrap=True)


@app.command("list")
def list_policies(output: OutputOption = Format.TABLE) -> None:
    """List the policies that bind you (an administrator: every policy)."""
    from berth.api_policies import PoliciesApi

    listing(output, lambda api: api.policies(), COLUMNS, rows, api=PoliciesApi)


@app.command("remove")
def remove(kind: KindArgument, name: NameArgument, output: OutputOption = Format.TABLE) -> None:
    """Remove a policy: nothing it set applies any more. Administrators only."""
    from berth.api_policies import PoliciesApi

    removed = answer(output, lambda api: api.remove_policy(kind.value, name), PoliciesApi)
    if removed is not None:
        console.print(f"Removed policy {removed.kind}/{removed.name}.", highlight=False)


def _quota(in_use: int | None, limit: int | None) -> str:
    return f"{in_use if in_use is not None else '?'}/{'-' if limit is None else limit}"


def rows(policies: list[Policy]) -> Rows:
    return [{"policy": f"{p.kind}/{p.name}", "entries": "any" if p.rules.entries is None else p.rules.entries,
             "sources": "any" if p.rules.model_sources is None else p.rules.model_sources,
             "hours": p.rules.deploy_hours or "any",
             "gpus": _quota(p.in_use.gpus if p.in_use else None, p.rules.max_gpus),
             "copies": _quota(p.in_use.copies if p.in_use else None, p.rules.max_copies), "set": p.set_by}
            for p in policies]


def describe(policy: Policy) -> str:
    """The policy in one sentence."""
    row = {key: ", ".join(value) if isinstance(value, list) else value for key, value in rows([policy])[0].items()}
    return (f"entries {row['entries']}; model sources {row['sources']}; deploy hours {row['hours']}; "
            f"GPUs {row['gpus']}; copies {row['copies']} (in use/max)")
