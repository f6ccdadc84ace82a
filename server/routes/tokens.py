"""API token routes: mint (capped lifetime, recorded), list, revoke by id, revoke the token you hold, and
revoke every token of a user."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import MintedToken
from berth.errors import AuthenticationError, PermissionDeniedError
from berth.security import API_AUDIENCE
from berth.tokens import RevokeBody, RevokeResult, TokenKind, TokenMintBody, TokenRecord, capped_lifetime
from server.context import Context
from server.guards import Caller

router = APIRouter()


@router.post("/v1/users/{name}/tokens", status_code=201, response_model=MintedToken)
async def user_token(name: str, body: TokenMintBody, context: Context, who: Caller) -> dict[str, Any]:
    """An API token for `name` (administrators: any user; others: themselves), at most the cluster's
    cap long. The user's groups and organization are read now and carried in the token."""
    if name != who.user and not who.admin:
        raise PermissionDeniedError("Only administrators may mint API tokens for other users.")
    identity = await run_in_threadpool(context.store.identity, name)
    ttl = capped_lifetime(body.expiration, context.settings.max_api_token_expiration_s, "API tokens")
    token = context.signing.api_token(identity, ttl, TokenKind.USER.value, body.note)
    claims = context.verifier.verify(token, API_AUDIENCE)
    await run_in_threadpool(context.tokens.record, claims, TokenKind.USER.value, body.note, who.user)
    return {"user": name, "token": token, "id": claims["jti"], "expires_at": float(claims["exp"])}


@router.get("/v1/tokens")
async def list_tokens(context: Context, who: Caller, user: str | None = None) -> list[TokenRecord]:
    """Your API tokens (administrators: everyone's, or one user's with ?user=)."""
    return await run_in_threadpool(context.tokens.records, who, user)


@router.delete("/v1/tokens/{token_id}")
async def revoke_token(token_id: str, context: Context, who: Caller) -> RevokeResult:
    return await run_in_threadpool(context.tokens.revoke, who, token_id)


@router.post("/v1/tokens/revoke")
async def revoke_presented(body: RevokeBody, context: Context, who: Caller) -> RevokeResult:
    """Revoke the token in the body (what `berth up` does with the administrator token it replaces)."""
    try:
        claims = context.verifier.verify(body.token, API_AUDIENCE)
    except AuthenticationError:
        return RevokeResult(revoked=[], note="not a live API token of this cluster: nothing to revoke")
    return await run_in_threadpool(context.tokens.revoke_presented, who, claims)


@router.post("/v1/users/{name}/tokens/revoke-all")
async def revoke_all(name: str, context: Context, who: Caller) -> RevokeResult:
    return await run_in_threadpool(context.tokens.revoke_all, who, name)
