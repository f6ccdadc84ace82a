"""Replica key routes: a gateway (run by a node agent for its owner) reads the keys of the copies it
discovers. Users never get a copy's key; the endpoint proxy and LiteLLM get theirs from the admin routes
table and the endpoint's service replica list (server/app.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, Header
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from berth.errors import AuthenticationError, PermissionDeniedError
from berth.security import API_AUDIENCE, REPLICA_KEYS_AUDIENCE, Identity
from server.access import in_scope
from server.models import EndpointRow
from server.tokens import Guard

if TYPE_CHECKING:
    from server.app import ServerContext

# As long as the owner token the gateway polls the endpoints API with (a restart renews both).
REPLICA_KEYS_TOKEN_TTL_S = 7 * 24 * 3600


class ReplicaKeysToken(BaseModel):
    token: str = Field(repr=False)


class ReplicaKeysList(BaseModel):
    """copy id → key, for every published copy of a Proxy=false pool the gateway's owner may reach."""

    keys: dict[str, str] = Field(default_factory=dict, repr=False)


def _discoverable(endpoint: EndpointRow) -> bool:
    """A Proxy=false pool: its copies are called directly (a Proxy=true pool's sit behind LiteLLM)."""
    facts = endpoint.annotations or {}
    return bool(facts.get("pool")) and not facts.get("proxy", True)


def replica_keys_router(context: ServerContext, admin: Guard) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/internal/users/{user}/replica-keys-token")
    async def replica_keys_token(user: str, _who: Identity = Depends(admin)) -> ReplicaKeysToken:
        """Minted by a node agent for the gateway it starts for `user`; only the route below reads it."""
        owner = await run_in_threadpool(context.store.identity, user)  # an unknown user: 404
        return ReplicaKeysToken(token=context.signing.replica_keys_token(owner, REPLICA_KEYS_TOKEN_TTL_S))

    @router.get("/v1/internal/replica-keys")
    async def replica_keys(authorization: str | None = Header(None)) -> ReplicaKeysList:
        """The keys of the copies the token's owner may reach (an administrator's API token: every copy)."""
        owner = await _owner(context, authorization)
        endpoints = await run_in_threadpool(context.store.endpoints)
        reachable = {e.id for e in endpoints if _discoverable(e) and (owner.admin or in_scope(e, owner))}
        replicas = await run_in_threadpool(context.store.replicas)
        return ReplicaKeysList(keys={r.copy_id: context.replica_keys.for_copy(r.copy_id) for r in replicas
                                     if r.endpoint_id in reachable})

    return router


async def _owner(context: ServerContext, authorization: str | None) -> Identity:
    """Whose reach the caller has: the owner a replica-keys token speaks for (its claims, as in the owner
    token the gateway discovers with), or an administrator. Anyone else is refused, whatever they hold."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise AuthenticationError("No token.")
    token = authorization[7:].strip()
    try:
        claims = context.verifier.verify(token, REPLICA_KEYS_AUDIENCE)
    except AuthenticationError:
        claims = context.verifier.verify(token, API_AUDIENCE)
        await context.tokens.admit(claims)
        identity = Identity.from_claims(claims)
        if not identity.admin:
            raise PermissionDeniedError(
                "Only a gateway Berth runs, or an administrator, may read copies' keys.") from None
        return identity
    return Identity.from_claims(claims)
