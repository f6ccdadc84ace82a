"""API key routes: create a `bk_…` key for an endpoint in the caller's scope (TTL capped by the
endpoint's key policy), list, show, rotate and revoke one's own (an administrator: any); and, for the
endpoint proxy, verify a presented key and reserve requests of its lifetime quota."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import (
    EventKind,
    IssuedKey,
    KeyRecord,
    KeyReservation,
    KeyReserveRequest,
    KeyRotateRequest,
    KeyVerdict,
    KeyVerifyRequest,
)
from berth.errors import UserInputError
from berth.security import Identity
from berth.tokens import parse_duration
from server.context import Context
from server.events import Audience, EventDraft, record
from server.guards import Admin, Caller, CreatableKey, OwnedKey
from server.store.api_keys import MAX_OVERLAP_S, key_lifetime_s

router = APIRouter()


@router.post("/v1/keys", status_code=201)
async def create_key(creation: CreatableKey, context: Context, who: Caller) -> IssuedKey:
    """A key speaking for the caller on one endpoint (and model); its plaintext is in this answer only."""
    body, endpoint = creation
    ttl_s = key_lifetime_s(body.ttl, endpoint, context.settings.key_max_ttl)
    issued = await run_in_threadpool(context.api_keys.create, who, body, ttl_s)
    await run_in_threadpool(record, context.store, _key_event(EventKind.KEY_CREATED, issued.record, who))
    return issued


@router.get("/v1/keys")
async def list_keys(context: Context, who: Caller) -> list[KeyRecord]:
    """Your API keys (an administrator: everyone's), never their secrets or hashes."""
    return await run_in_threadpool(context.api_keys.records, who)


@router.get("/v1/keys/{key_id}")
async def describe_key(key: OwnedKey, context: Context) -> KeyRecord:
    """One key, with what it was used for: requests made and answered, counted from the audit chain, which
    records every request (a key without a quota too: `requests_used` counts only quota reservations)."""
    requests = await run_in_threadpool(context.store.audit.key_requests, key.id)
    return key.model_copy(update={"requests": requests})


@router.post("/v1/keys/{key_id}/rotate")
async def rotate_key(body: KeyRotateRequest, key: OwnedKey, context: Context) -> IssuedKey:
    overlap_s = parse_duration(body.overlap)
    if overlap_s > MAX_OVERLAP_S:
        raise UserInputError(f"Overlap {body.overlap.strip()} is longer than 7d; choose a shorter --overlap.")
    return await run_in_threadpool(context.api_keys.rotate, key.id, overlap_s)


@router.delete("/v1/keys/{key_id}")
async def revoke_key(key: OwnedKey, context: Context, who: Caller) -> KeyRecord:
    revoked = await run_in_threadpool(context.api_keys.revoke, key.id)
    await run_in_threadpool(record, context.store, _key_event(EventKind.KEY_REVOKED, revoked, who))
    return revoked


def _key_event(kind: EventKind, key: KeyRecord, who: Identity) -> EventDraft:
    """Seen by the key's creator (and administrators): a key is its creator's, whoever revoked it."""
    done = "created" if kind is EventKind.KEY_CREATED else "revoked"
    return EventDraft(kind, f"{who.user} {done} API key {key.id} ({key.name}) for endpoint {key.endpoint_id}",
                      audience=Audience.of_user(key.owner), endpoint_id=key.endpoint_id, actor=who.user,
                      details={"key_id": key.id, "name": key.name})


# --- for the endpoint proxy (Berth's own services: administrators' tokens) ----------------------------
@router.post("/v1/internal/keys/verify")
async def verify_key(body: KeyVerifyRequest, context: Context, _who: Admin) -> KeyVerdict:
    return await run_in_threadpool(context.api_keys.verify, body.key, body.endpoint_id, body.model)


@router.post("/v1/internal/keys/{key_id}/reserve")
async def reserve_requests(key_id: str, body: KeyReserveRequest, context: Context, _who: Admin) -> KeyReservation:
    return await run_in_threadpool(context.api_keys.reserve, key_id, body.requests)
