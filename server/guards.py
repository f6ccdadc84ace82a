"""Who may call a route, as FastAPI dependencies: a caller with an API token, an administrator, an
endpoint's own service, an endpoint the caller is in scope of or owns, a workflow they may read or own, a
gateway reading its owner's copies' keys, and API keys one may create or manage. Each route names its
guard; none repeats the rule."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Header
from starlette.concurrency import run_in_threadpool

from berth.contracts import KeyCreateRequest, KeyRecord
from berth.errors import AuthenticationError, NotFoundError, PermissionDeniedError, UserInputError
from berth.security import API_AUDIENCE, REPLICA_KEYS_AUDIENCE, Identity
from server.access import WorkflowAccess, in_scope, workflow_access
from server.context import Context
from server.store.tables import EndpointRow


def service_audience(endpoint_id: str) -> str:
    return f"endpoint-service:{endpoint_id}"


def _bearer(authorization: str | None) -> str | None:
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[7:].strip()


async def caller(context: Context, authorization: str | None = Header(None)) -> Identity:
    token = _bearer(authorization)
    if token is None:
        raise AuthenticationError("No Berth API token. Run `berth login` or set BERTH_TOKEN.")
    claims = context.verifier.verify(token, API_AUDIENCE)
    await context.tokens.admit(claims)  # revoked tokens are refused (issue 11)
    return Identity.from_claims(claims)


Caller = Annotated[Identity, Depends(caller)]


async def admin(identity: Caller) -> Identity:
    if not identity.admin:
        raise PermissionDeniedError("Only administrators and Berth's own services may call this route.")
    return identity


Admin = Annotated[Identity, Depends(admin)]


async def service_or_admin(endpoint_id: str, context: Context, authorization: str | None = Header(None)) -> None:
    """Admit the endpoint's own service token (its LiteLLM sync hook) or an administrator's API token."""
    token = _bearer(authorization)
    if token is None:
        raise AuthenticationError("No token.")
    try:
        context.verifier.verify(token, service_audience(endpoint_id))
    except AuthenticationError:
        claims = context.verifier.verify(token, API_AUDIENCE)
        refusal = context.tokens.refusal(claims)
        if refusal:
            raise AuthenticationError(refusal) from None
        if not Identity.from_claims(claims).admin:
            raise PermissionDeniedError("Only the endpoint's service or an administrator may call this.") from None


async def visible_endpoint(endpoint_id: str, context: Context, who: Caller) -> EndpointRow:
    """The `{endpoint_id}` of the path if the caller is in its scope (or an administrator); outside its
    scope it does not exist for them (404)."""
    endpoint = await run_in_threadpool(context.store.endpoint, endpoint_id)
    if not who.admin and not in_scope(endpoint, who):
        raise NotFoundError(f"No endpoint with ID '{endpoint_id}'. "
                            "Run `berth endpoint list` to see the endpoints.")
    return endpoint


async def reachable_endpoint(endpoint_id: str, context: Context, who: Caller) -> EndpointRow:
    """The `{endpoint_id}` of the path if the caller is in its scope (or an administrator); outside it
    the caller is told whose endpoint it is (403), as the token and client-config routes always did."""
    endpoint = await run_in_threadpool(context.store.endpoint, endpoint_id)
    if not who.admin and not in_scope(endpoint, who):
        raise PermissionDeniedError(f"You are outside endpoint {endpoint_id}'s scope ({endpoint.scope}); "
                                    f"ask its owner {endpoint.owner}.")
    return endpoint


VisibleEndpoint = Annotated[EndpointRow, Depends(visible_endpoint)]
ReachableEndpoint = Annotated[EndpointRow, Depends(reachable_endpoint)]


async def owned_endpoint(endpoint: VisibleEndpoint, who: Caller) -> EndpointRow:
    """The `{endpoint_id}` of the path if the caller owns it (or is an administrator); in its scope but
    not its owner: 403 naming the owner; outside its scope: 404, as VisibleEndpoint."""
    if not who.admin and who.user != endpoint.owner:
        raise PermissionDeniedError(f"Only the owner of endpoint {endpoint.id} ({endpoint.owner}) or an "
                                    "administrator may change it.")
    return endpoint


OwnedEndpoint = Annotated[EndpointRow, Depends(owned_endpoint)]


async def readable_workflow(workflow_id: str, context: Context, who: Caller) -> WorkflowAccess:
    """The `{workflow_id}` of the path, as the caller may read it."""
    return await run_in_threadpool(workflow_access, context.store, workflow_id, who)


ReadableWorkflow = Annotated[WorkflowAccess, Depends(readable_workflow)]


def owned_workflow(what: str) -> Callable[[WorkflowAccess], Awaitable[WorkflowAccess]]:
    """A guard: the `{workflow_id}` of the path if the caller owns it or is an administrator; `what` ends
    the refusal ("… may stop it")."""

    async def owned(access: ReadableWorkflow) -> WorkflowAccess:
        access.require_owner(what)
        return access

    return owned


async def replica_keys_owner(context: Context, authorization: str | None = Header(None)) -> Identity:
    """Whose reach the caller has: the owner a replica-keys token speaks for (its claims, as in the owner
    token the gateway discovers with), or an administrator. Anyone else is refused, whatever they hold."""
    token = _bearer(authorization)
    if token is None:
        raise AuthenticationError("No token.")
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


async def creatable_key(body: KeyCreateRequest, context: Context, who: Caller) -> tuple[KeyCreateRequest, EndpointRow]:
    """A key request for an endpoint the caller may call (in its scope, or an administrator): a key never
    reaches further than its creator."""
    endpoint = await run_in_threadpool(context.store.endpoint, body.endpoint_id)
    if not who.admin and not in_scope(endpoint, who):
        raise PermissionDeniedError(f"You are outside endpoint {endpoint.id}'s scope ({endpoint.scope}); "
                                    "a key can only call what its creator may.")
    if body.model is not None and endpoint.model_id is not None and body.model != endpoint.model_id:
        # Every request of such a key would be refused (issue 31): say so now. A gateway (no model_id) serves
        # many models and is not checked here.
        raise UserInputError(f"Endpoint {endpoint.id} serves {endpoint.model_id}, not {body.model[:200]}; a key "
                             f"for that model would be refused on every request. Use --model {endpoint.model_id} "
                             "or leave --model out.")
    return body, endpoint


async def owned_key(key_id: str, context: Context, who: Caller) -> KeyRecord:
    """The `{key_id}` of the path if the caller created it (or is an administrator); else 404."""
    return await run_in_threadpool(context.api_keys.owned, who, key_id)


CreatableKey = Annotated[tuple[KeyCreateRequest, EndpointRow], Depends(creatable_key)]
OwnedKey = Annotated[KeyRecord, Depends(owned_key)]
