"""`berth endpoint …` (and `berth workflow endpoints …`): list endpoints, mint endpoint tokens, write a
ready OpenCode config for one; `berth endpoint tokens|revoke-token` (cli/endpoint_tokens.py) list and revoke
the tokens, `berth endpoint policy` (cli/endpoint_policy.py) sets an endpoint's policy."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from cli import endpoint_policy, endpoint_tokens
from cli.common import Format, OutputOption, answer, call, emit_json, errors, fail, listing

if TYPE_CHECKING:
    from berth.api_client import ApiClient
    from berth.contracts.endpoints import EndpointClientFacts

endpoints_app = typer.Typer(help="Workflow endpoints.", no_args_is_help=True)
app = typer.Typer(help="Endpoints and their access tokens.", no_args_is_help=True)


@endpoints_app.command("list")
def endpoints_list(output: OutputOption = Format.TABLE) -> None:
    """List endpoints you may reach."""
    listing(output, lambda api: api.endpoints(),
            [("id", "ENDPOINT ID"), ("workflow_id", "WORKFLOW"), ("service", "SERVICE"), ("url", "URL"),
             ("scope", "SCOPE"), ("ready", "READY")])


app.command("list", help="List endpoints you may reach (alias of `berth workflow endpoints list`).")(endpoints_list)


@app.command("generate-token")
def endpoint_generate_token(endpoint_id: str,
                            expiration: Annotated[str, typer.Option(help="e.g. 30m, 8h, 7d")] = "8h",
                            output: OutputOption = Format.TABLE,
                            note: Annotated[str, typer.Option(help="Why it exists (`berth endpoint tokens` shows "
                                                                   "it)")] = "") -> None:
    """Mint a token bound to one endpoint, carrying your identity."""
    data = answer(output, lambda api: api.generate_token(endpoint_id, expiration, note))
    if data is None:
        return  # printed as JSON, its id included
    # Standard output is the token alone (`export BERTH_TOKEN=$(berth endpoint generate-token …)`); its id,
    # for revoking it, goes to standard error.
    sys.stdout.write(data.token + "\n")
    if data.id:
        errors.print(f"Token id {data.id} (`berth endpoint revoke-token {endpoint_id} {data.id}` ends it).",
                     highlight=False, soft_wrap=True)


@endpoints_app.command("generate-token")
def endpoints_generate_token(endpoint_id: str, expiration: Annotated[str, typer.Option()] = "8h") -> None:
    """Mint a token bound to one endpoint (alias of `berth endpoint generate-token`)."""
    endpoint_generate_token(endpoint_id, expiration, Format.TABLE)


@app.command("opencode-config")
def endpoint_opencode_config(
    endpoint_id: str,
    provider: Annotated[str, typer.Option(help="Provider key: models are <provider>/<model id>")] = "berth",
    output_limit: Annotated[int | None, typer.Option(help="limit.output (default: context/4, ≤ 8192)")]
    = None,
    verify: Annotated[bool, typer.Option(help="Ask the endpoint's /v1/models for the exact model id")] = True,
) -> None:
    """Print a ready opencode.json for an endpoint: base URL, {env:BERTH_TOKEN}, exact model id, limits."""
    # The help above is pinned (tests/cli/help_before_split.json). A gateway endpoint gets every model it
    # serves, each with its own pool's context, and the largest context as the default (issue 31).
    from berth.contracts.endpoints import ServedModel
    from berth.errors import BerthError
    from berth.opencode import TOKEN_ENV, opencode_config, preflight, served_target

    async def work(api: ApiClient) -> tuple[EndpointClientFacts, tuple[str, ...] | None, str | None]:
        facts = await api.endpoint_client_config(endpoint_id)
        if not verify:
            return facts, None, None
        try:  # an administrator outside the endpoint's scope is refused a token: the catalog's model id then
            token = (await api.generate_token(endpoint_id, "5m")).token
            return facts, await preflight(facts.url, token, ca_file=api.ca_file), None
        except BerthError as error:
            return facts, None, str(error)

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", provider):
        raise fail(f"--provider '{provider}' must be a plain name such as berth (it prefixes model ids).")
    facts, listed, problem = call(work)
    if problem:
        errors.print(f"[yellow]warning:[/] could not ask the endpoint ({problem}); using the model ids the API "
                     "gives.", highlight=False, soft_wrap=True)
    served = facts.models or [ServedModel(model_id=facts.model_id, max_context=facts.max_context,
                                          tool_calling=facts.tool_calling)]  # an API before `models`
    try:
        config = opencode_config({provider: served_target(facts.url, listed, served, output_limit=output_limit,
                                                          label="Berth")})
    except BerthError as error:
        raise fail(str(error)) from None
    emit_json(config)
    without_tools = [model.model_id for model in served if not model.tool_calling]
    if without_tools:
        errors.print(f"[yellow]note:[/] {', '.join(without_tools)}: started without --enable-auto-tool-choice: "
                     "OpenCode can chat but cannot read or edit files with it (add the tool-calling flags to "
                     "ExtraArgs).", highlight=False, soft_wrap=True)
    errors.print(f"Save as ~/.config/opencode/opencode.json (or a project's opencode.json), then: export "
                 f"{TOKEN_ENV}=$(berth endpoint generate-token {endpoint_id} --expiration 8h)",
                 highlight=False, soft_wrap=True)
    if facts.url.startswith("https://"):
        errors.print("If the cluster uses a private CA (`berth ca-cert` prints it), OpenCode must trust it, or "
                     "it answers only \"Session not found\": berth ca-cert > cluster-ca.pem; "
                     "export NODE_EXTRA_CA_CERTS=$PWD/cluster-ca.pem", highlight=False, soft_wrap=True)


app.command("tokens")(endpoint_tokens.tokens_list)
app.command("revoke-token")(endpoint_tokens.revoke_token)
app.add_typer(endpoint_policy.app, name="policy")
