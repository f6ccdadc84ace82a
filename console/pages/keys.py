"""API key pages: the user's `bk_…` keys (an administrator: everyone's) without their secrets or hashes, the
create form (what `berth key create` takes), and rotate and revoke per key. A new secret exists only in the
answer to the POST that made it — that very page shows it once, with a copy button; Berth keeps its hash,
so no later page can show it again (and every console answer is sent `no-store`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import IssuedKey, KeyCreateRequest, KeyRotateRequest
from berth.errors import BerthError
from console.pages.form_values import form_text, given, validated
from console.render import page, redirect
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)

LABELS = {"name": "Name", "endpoint_id": "Endpoint", "model": "Model", "ttl": "Lifetime",
          "request_quota": "Request quota", "tokens_per_minute": "Tokens per minute",
          "max_concurrent": "Max concurrent", "overlap": "Overlap"}
FIELDS = ("name", "endpoint_id", "model", "ttl", "request_quota", "tokens_per_minute", "max_concurrent")


async def _keys_page(request: Request, session: Session, status_code: int = 200, *,
                     values: dict[str, str] | None = None, error: str | None = None, action_error: str | None = None,
                     issued: IssuedKey | None = None, issued_what: str = "") -> Response:
    keys = await session.api.keys()
    endpoints = await session.api.endpoints()
    context: dict[str, Any] = {"keys": keys, "endpoints": endpoints, "values": values or {}, "error": error,
                               "action_error": action_error, "issued": issued, "issued_what": issued_what}
    return page(request, session, "keys.html", status_code, **context)


@router.get("/keys")
async def keys(request: Request, session: Signed) -> Response:
    return await _keys_page(request, session)


@router.post("/keys", dependencies=[CsrfChecked])
async def create(request: Request, session: Signed) -> Response:
    """Create a key and answer the page with its secret, once: a redirect would need the secret stored."""
    form = await form_text(request)
    try:
        issued = await session.api.create_key(validated(KeyCreateRequest, given(form, *FIELDS), LABELS))
    except BerthError as error:
        return await _keys_page(request, session, error.http_status, values=form, error=str(error))
    return await _keys_page(request, session, issued=issued, issued_what="Created")


@router.post("/keys/{key_id}/rotate", dependencies=[CsrfChecked])
async def rotate(request: Request, session: Signed, key_id: str) -> Response:
    """A new secret for the key, shown once on this answer; the current one keeps working for `overlap`."""
    form = await form_text(request)
    try:
        rotation = validated(KeyRotateRequest, given(form, "overlap"), LABELS)
        issued = await session.api.rotate_key(key_id, rotation)
    except BerthError as error:
        return await _keys_page(request, session, error.http_status, action_error=str(error))
    return await _keys_page(request, session, issued=issued, issued_what="Rotated")


@router.post("/keys/{key_id}/revoke", dependencies=[CsrfChecked])
async def revoke(request: Request, session: Signed, key_id: str) -> Response:
    try:
        await session.api.revoke_key(key_id)
    except BerthError as error:
        return await _keys_page(request, session, error.http_status, action_error=str(error))
    return redirect("/ui/keys")
