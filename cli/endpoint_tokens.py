"""`berth endpoint tokens EP` and `berth endpoint revoke-token EP TOKEN_ID`: an endpoint's unexpired tokens
(ids, whom they name, who minted them, expiry; never the tokens) and revoking one, which the endpoint
proxies refuse within a couple of seconds. `berth endpoint generate-token` (cli/endpoint.py) mints them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Format, OutputOption, Rows, answer, console, listing, wire

if TYPE_CHECKING:
    from berth.contracts.endpoints import EndpointTokenRecord

COLUMNS = [("id", "ID"), ("user", "USER"), ("minted_by", "MINTED BY"), ("minted", "MINTED"),
           ("expires", "EXPIRES"), ("state", "STATE"), ("note", "NOTE")]


def _when(value: float | None) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M") if value else "-"


def rows(records: list[EndpointTokenRecord]) -> Rows:
    """The table's rows: times as local dates, and whether (and by whom) each token was revoked."""
    return [{**wire(r), "minted": _when(r.minted_at), "expires": _when(r.expires_at),
             "state": f"revoked by {r.revoked_by}" if r.revoked else "active"} for r in records]


def tokens_list(endpoint_id: str, output: OutputOption = Format.TABLE) -> None:
    """List an endpoint's unexpired tokens by id (never the tokens themselves).

    Its owner and administrators see every token of the endpoint; anyone else their own."""
    listing(output, lambda api: api.endpoint_tokens(endpoint_id), COLUMNS, rows)


def revoke_token(endpoint_id: str,
                 token_id: Annotated[str, typer.Argument(help="The token's id (`berth endpoint tokens EP`)")],
                 output: OutputOption = Format.TABLE) -> None:
    """Revoke one endpoint token by id; the endpoint proxies refuse it within seconds."""
    revoked = answer(output, lambda api: api.revoke_endpoint_token(endpoint_id, token_id))
    if revoked is None:
        return  # printed as JSON
    record = revoked.record
    if revoked.already_revoked:
        console.print(f"Token {record.id} of endpoint {record.endpoint_id} was already revoked "
                      f"({_when(record.revoked_at)}, by {record.revoked_by}).", highlight=False)
    else:
        console.print(f"Revoked token {record.id} of endpoint {record.endpoint_id} (naming {record.user}); "
                      "the endpoint proxies refuse it within a couple of seconds.", highlight=False)
