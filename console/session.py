"""Who is signed in to the console, and the checks every console request passes.

The session is the user's own Berth API token (what `berth login` saves), kept in an HttpOnly,
SameSite=Strict cookie scoped to /ui; the page asks the API who it belongs to on every request, so a revoked
or expired token signs the browser out at once. State-changing requests carry a CSRF token (form field
`csrf` or header `X-CSRF-Token`) that must equal the `berth_csrf` cookie (double submit), and a cross-site
`Sec-Fetch-Site` or foreign `Origin` is refused before that."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request, Response

from berth.api_client import ApiClient
from berth.contracts import UserView
from berth.errors import AuthenticationError, PermissionDeniedError
from console.bridge import api_as

SESSION_COOKIE = "berth_session"
CSRF_COOKIE = "berth_csrf"
CSRF_HEADER = "x-csrf-token"
# A Berth token is a few hundred bytes; anything near this is not one, and is never sent on.
MAX_TOKEN_BYTES = 4096


class SignInNeeded(AuthenticationError):
    """No session, or the API no longer accepts its token: the page sends the browser to sign-in."""


@dataclass
class Session:
    token: str
    user: UserView
    csrf: str
    api: ApiClient


def new_csrf() -> str:
    return secrets.token_urlsafe(32)


def set_cookies(request: Request, response: Response, token: str | None, csrf: str) -> None:
    """Write (or with token=None, clear) the session, and write the CSRF cookie."""
    secure = request.url.scheme == "https"
    if token is None:
        response.delete_cookie(SESSION_COOKIE, path="/ui", secure=secure, httponly=True, samesite="strict")
    else:
        response.set_cookie(SESSION_COOKIE, token, path="/ui", secure=secure, httponly=True, samesite="strict")
    response.set_cookie(CSRF_COOKIE, csrf, path="/ui", secure=secure, httponly=True, samesite="strict")


def valid_token_shape(token: str) -> bool:
    return 0 < len(token) <= MAX_TOKEN_BYTES and token.isascii() and token.isprintable() and " " not in token


async def signed_in(request: Request) -> AsyncIterator[Session]:
    """The signed-in user's session with an API client as them; closed when the request ends."""
    token = request.cookies.get(SESSION_COOKIE, "")
    if not valid_token_shape(token):
        raise SignInNeeded("Sign in with your Berth token.")
    api = api_as(request.app, token)
    try:
        try:
            user = await api.whoami()
        except AuthenticationError as error:
            raise SignInNeeded(f"Sign in again: {error}") from None
        yield Session(token=token, user=user, csrf=request.cookies.get(CSRF_COOKIE) or new_csrf(), api=api)
    finally:
        await api.aclose()


def _same_origin(request: Request) -> bool:
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    parts = urlsplit(origin)
    return parts.netloc == request.headers.get("host", "")


async def csrf_checked(request: Request) -> None:
    """Refuse a state-changing request that did not come from a console page of this origin."""
    if not _same_origin(request):
        raise PermissionDeniedError("Refused: this request came from another site. Use the console's own pages.")
    expected = request.cookies.get(CSRF_COOKIE, "")
    sent = request.headers.get(CSRF_HEADER, "")
    if not sent and request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        form = await request.form()
        value = form.get("csrf", "")
        sent = value if isinstance(value, str) else ""
    if not expected or not hmac.compare_digest(expected.encode(), sent.encode()):
        raise PermissionDeniedError("Refused: the form's CSRF token is missing or stale. Reload the page and retry.")


Signed = Annotated[Session, Depends(signed_in)]
CsrfChecked = Depends(csrf_checked)
