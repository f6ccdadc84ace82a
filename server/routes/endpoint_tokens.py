"""Endpoint token routes: mint one (recorded by id, never the token), list an endpoint's unexpired tokens,
and revoke one by id. The endpoint proxies verify tokens offline; they learn the revoked ids from the routes
table (server/routes/internal.py) within a refresh, about a second."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import EndpointToken, EndpointTokenRecord, EndpointTokenRequest, EndpointTokenRevoked, Refusal
from berth.errors import PermissionDeniedError, UserInputError
from berth.tokens import parse_duration
from server.access import in_scope
from server.context import Context
from server.guards import Caller, ReachableEndpoint
from server.token_minting import mint_endpoint_token

router = APIRouter()

# What each route may refuse, for /openapi.json: one line in `detail` (server/app.py), status by status.
Refusals = dict[int | str, dict[str, Any]]


def _refusal(status: int, description: str) -> Refusals:
    return {status: {"model": Refusal, "description": description}}


BAD_INPUT = _refusal(400, "An ID in the path or a value in the body that is not one")
NO_TOKEN = _refusal(401, "No API token, or an expired or revoked one")
OUTSIDE = _refusal(403, "The caller is outside the endpoint's scope")
NO_ENDPOINT = _refusal(404, "No such endpoint")
NO_TOKEN_ID = _refusal(404, "No such endpoint, or no token of it with this id that the caller may see")


@router.post("/v1/endpoints/{endpoint_id}/tokens", response_model=EndpointToken,
             responses={**BAD_INPUT, **NO_TOKEN, **OUTSIDE, **NO_ENDPOINT})
async def generate_token(endpoint_id: str, body: EndpointTokenRequest, endpoint: ReachableEndpoint, who: Caller,
                         context: Context) -> dict[str, Any]:
    """An endpoint token for the caller. The proxy admits a token's holder only inside the endpoint's scope,
    administrators included (berth/scopes.py), so a token it would refuse is refused here instead."""
    if not in_scope(endpoint, who):
        raise PermissionDeniedError(f"You are outside endpoint {endpoint_id}'s scope ({endpoint.scope}, owner "
                                    f"{endpoint.owner}): the endpoint proxy would refuse a token of yours, even an "
                                    "administrator's. Ask its owner to widen the scope.")
    ttl = parse_duration(body.expiration)
    limit = context.settings.max_token_expiration_s
    if ttl > limit:
        raise UserInputError(f"Expiration {body.expiration} is longer than this cluster allows "
                             f"({limit // 3600} h). Choose a shorter --expiration.")
    token, claims = await run_in_threadpool(mint_endpoint_token, context, who, endpoint_id, ttl, who.user, body.note)
    return {"endpoint_id": endpoint_id, "token": token, "expires_at": float(claims["exp"]), "id": claims["jti"]}


@router.get("/v1/endpoints/{endpoint_id}/tokens", response_model=list[EndpointTokenRecord],
            responses={**BAD_INPUT, **NO_TOKEN, **OUTSIDE, **NO_ENDPOINT})
async def list_tokens(endpoint: ReachableEndpoint, who: Caller, context: Context) -> list[EndpointTokenRecord]:
    """The endpoint's unexpired tokens (never the tokens themselves): all of them for its owner and
    administrators, the caller's own for anyone else in its scope."""
    return await run_in_threadpool(context.store.endpoint_tokens.records, endpoint, who)


@router.delete("/v1/endpoints/{endpoint_id}/tokens/{token_id}", response_model=EndpointTokenRevoked,
               responses={**BAD_INPUT, **NO_TOKEN, **OUTSIDE, **NO_TOKEN_ID})
async def revoke_token(token_id: str, endpoint: ReachableEndpoint, who: Caller,
                       context: Context) -> EndpointTokenRevoked:
    """Revoke one token by id (again: nothing changes, and the answer says so). The endpoint proxies refuse
    it from their next routes-table refresh."""
    return await run_in_threadpool(context.store.endpoint_tokens.revoke, endpoint, who, token_id)
