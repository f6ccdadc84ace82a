"""`berth endpoint policy show|set|clear`: an endpoint's policy, its override of the cluster's limits and
its cap on API keys' lifetimes. Its owner may only tighten the cluster's limits; an administrator may set
anything. The endpoint proxies apply a change within a second."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Format, OutputOption, answer, console, fail

if TYPE_CHECKING:
    from berth.api_client import ApiClient
    from berth.contracts.endpoint_policy import EndpointPolicy

app = typer.Typer(help="An endpoint's limits override and API-key TTL cap.", no_args_is_help=True)


def _print(endpoint_id: str, policy: EndpointPolicy) -> None:
    import yaml

    ttl = policy.key_max_ttl or "the cluster's (key_max_ttl)"
    console.print(f"Endpoint {endpoint_id}", highlight=False)
    console.print(f"Key max TTL: {ttl}", highlight=False)
    if policy.limits is None:
        console.print("Limits:      the cluster's (no override)", highlight=False)
        return
    fields = policy.limits.model_dump(mode="json", by_alias=True, exclude_unset=True)
    console.print("Limits (override of the cluster's, field by field):", highlight=False)
    console.print(yaml.safe_dump(fields, sort_keys=False).rstrip(), highlight=False, markup=False)


@app.command("show")
def policy_show(endpoint_id: Annotated[str, typer.Argument(help="The endpoint's ID (`berth endpoint list`)")],
                output: OutputOption = Format.TABLE) -> None:
    """Show an endpoint's limits override and API-key TTL cap."""
    policy = answer(output, lambda api: api.endpoint_policy(endpoint_id))
    if policy is not None:
        _print(endpoint_id, policy)


@app.command("set")
def policy_set(endpoint_id: Annotated[str, typer.Argument(help="The endpoint's ID (`berth endpoint list`)")],
               limits: Annotated[Path | None, typer.Option("--limits", help="A YAML or JSON (.json) file of "
                                                           "limits, shaped as BERTH_LIMITS_FILE's")] = None,
               key_max_ttl: Annotated[str | None, typer.Option("--key-max-ttl", help="Longest API key "
                                                               "lifetime, e.g. 7d")] = None,
               output: OutputOption = Format.TABLE) -> None:
    """Set an endpoint's limits override (replacing the one it has) and/or its API-key TTL cap; what you
    leave out is kept. An owner may only tighten the cluster's limits."""
    if limits is None and key_max_ttl is None:
        raise fail("Give --limits FILE, --key-max-ttl DURATION or both (`berth endpoint policy clear` clears).")
    from berth.contracts.endpoint_policy import EndpointPolicy
    from berth.errors import BerthError
    from berth.settings import read_limit_policy

    try:
        override = read_limit_policy(limits, f"--limits {limits}") if limits is not None else None
    except BerthError as error:
        raise fail(str(error)) from None
    try:
        EndpointPolicy.model_validate({"key_max_ttl": key_max_ttl})
    except ValueError:
        raise fail(f"--key-max-ttl '{key_max_ttl}' is not a duration like 30m, 8h or 7d.") from None

    async def work(api: ApiClient) -> EndpointPolicy:
        # PUT replaces the whole policy: the part not given is sent back as the endpoint has it.
        current = await api.endpoint_policy(endpoint_id)
        policy = EndpointPolicy(limits=current.limits if override is None else override,
                                key_max_ttl=current.key_max_ttl if key_max_ttl is None else key_max_ttl)
        return await api.set_endpoint_policy(endpoint_id, policy)

    policy = answer(output, work)
    if policy is not None:
        console.print(f"Set the policy of endpoint {endpoint_id}; the proxies apply it within a second.",
                      highlight=False)
        _print(endpoint_id, policy)


@app.command("clear")
def policy_clear(endpoint_id: Annotated[str, typer.Argument(help="The endpoint's ID (`berth endpoint list`)")],
                 output: OutputOption = Format.TABLE) -> None:
    """Clear an endpoint's policy: the cluster's limits and key TTL cap apply to it alone."""
    if answer(output, lambda api: api.clear_endpoint_policy(endpoint_id)) is not None:
        console.print(f"Cleared the policy of endpoint {endpoint_id}: the cluster's limits apply.",
                      highlight=False)
