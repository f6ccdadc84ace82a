"""`berth key create|list|describe|rotate|revoke`: API keys (`bk_…`) scoped to one endpoint (and model),
usable wherever an endpoint token is (OpenAI SDK, curl, OpenCode). The plaintext is shown once."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import Format, OutputOption, answer, console, listing

if TYPE_CHECKING:
    from berth.contracts.keys import IssuedKey, KeyRecord

app = typer.Typer(help="API keys: create one for an endpoint, list, describe, rotate or revoke yours.",
                  no_args_is_help=True)
COLUMNS = [("id", "ID"), ("name", "NAME"), ("owner", "OWNER"), ("endpoint_id", "ENDPOINT"), ("model", "MODEL"),
           ("state", "STATE"), ("expires", "EXPIRES"), ("used", "REQUESTS")]


def _when(value: float | None) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M") if value else "-"


def _row(record: KeyRecord) -> dict[str, Any]:
    limits = record.limits
    used = f"{limits.requests_used}/{limits.request_quota}" if limits.request_quota else "-"
    return {**record.model_dump(mode="json"), "expires": _when(record.expires_at), "used": used}


def _issued(issued: IssuedKey, what: str) -> None:
    record = issued.record
    console.print(f"{what} API key {record.id} ({record.name}) for endpoint {record.endpoint_id}"
                  f"{f', model {record.model}' if record.model else ''}, expires {_when(record.expires_at)}:",
                  highlight=False)
    console.print(issued.key, highlight=False, soft_wrap=True)
    console.print("Keep it now: it will not be shown again.", highlight=False)


@app.command("create")
def key_create(name: Annotated[str, typer.Argument(help="A name for the key (what it is for)")],
               endpoint: Annotated[str, typer.Option("--endpoint", help="The endpoint ID it may call")],
               model: Annotated[str | None, typer.Option(help="The only model it may ask for")] = None,
               ttl: Annotated[str | None, typer.Option(help="Lifetime, like 30d or 12h (default 30d, at most "
                                                       "the endpoint's cap)")] = None,
               request_quota: Annotated[int | None, typer.Option(help="Requests it may make in its life")] = None,
               tokens_per_minute: Annotated[int | None, typer.Option(help="Tokens per minute (answers' usage)")] = None,
               max_concurrent: Annotated[int | None, typer.Option(help="Requests it may have in flight")] = None,
               output: OutputOption = Format.TABLE) -> None:
    """Create an API key for an endpoint you may call; it speaks for you. Shown once."""
    from berth.contracts.keys import KeyCreateRequest

    fields = {"name": name, "endpoint_id": endpoint, "model": model, "ttl": ttl, "request_quota": request_quota,
              "tokens_per_minute": tokens_per_minute, "max_concurrent": max_concurrent}
    request = KeyCreateRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    issued = answer(output, lambda api: api.create_key(request))
    if issued is not None:
        _issued(issued, "Created")


@app.command("list")
def key_list(output: OutputOption = Format.TABLE) -> None:
    """List your API keys (an administrator: everyone's); never their secrets or hashes."""
    listing(output, lambda api: api.keys(), COLUMNS, lambda records: [_row(r) for r in records])


@app.command("describe")
def key_describe(key_id: Annotated[str, typer.Argument(help="The key's id (`berth key list`)")],
                 output: OutputOption = Format.TABLE) -> None:
    """Show one of your API keys: scope, state, limits and what it has used."""
    record = answer(output, lambda api: api.describe_key(key_id))
    if record is None:
        return
    limits = record.limits
    for label, value in (("ID", record.id), ("Name", record.name), ("Prefix", f"bk_{record.prefix}_…"),
                         ("Owner", f"{record.owner} ({record.org}; groups {', '.join(record.groups) or '-'})"),
                         ("Endpoint", record.endpoint_id), ("Model", record.model or "any"),
                         ("State", record.state), ("Created", _when(record.created_at)),
                         ("Expires", _when(record.expires_at)),
                         ("Previous secret until", _when(record.previous_valid_until)),
                         ("Requests", _requests(record)),
                         ("Tokens per minute", limits.tokens_per_minute or "-"),
                         ("Max concurrent", limits.max_concurrent or "-")):
        console.print(f"{label + ':':<23}{value}", highlight=False)


def _requests(record: KeyRecord) -> str:
    """`12 made, 11 answered; quota 40 of 100 reserved` (or `no quota`): what the key did, from the audit chain,
    beside what its quota holds (reserved in batches by the proxies, so at most a batch ahead of `made`)."""
    from berth.contracts.keys import KeyRequests

    used = record.requests or KeyRequests()
    limits = record.limits
    quota = (f"quota {limits.requests_used} of {limits.request_quota} reserved" if limits.request_quota is not None
             else "no quota")
    return f"{used.made} made, {used.answered} answered; {quota}"


@app.command("rotate")
def key_rotate(key_id: Annotated[str, typer.Argument(help="The key's id (`berth key list`)")],
               overlap: Annotated[str, typer.Option(help="How long the current secret keeps working")] = "1h",
               output: OutputOption = Format.TABLE) -> None:
    """Issue the key a new secret; the current one keeps working for --overlap. Shown once."""
    from berth.contracts.keys import KeyRotateRequest

    issued = answer(output, lambda api: api.rotate_key(key_id, KeyRotateRequest(overlap=overlap)))
    if issued is not None:
        _issued(issued, "Rotated")
        console.print(f"The previous secret works until {_when(issued.record.previous_valid_until)}.",
                      highlight=False)


@app.command("revoke")
def key_revoke(key_id: Annotated[str, typer.Argument(help="The key's id (`berth key list`)")],
               output: OutputOption = Format.TABLE) -> None:
    """Revoke an API key: refused by the endpoint proxy within seconds."""
    record = answer(output, lambda api: api.revoke_key(key_id))
    if record is not None:
        console.print(f"Revoked API key {record.id} ({record.name}).", highlight=False)
