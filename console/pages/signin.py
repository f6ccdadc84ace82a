"""Sign-in with a Berth user token (what `berth login` saves), sign-out, and the console's front door."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.errors import AuthenticationError
from console.bridge import api_as
from console.render import html, redirect
from console.routing import ConsoleRoute
from console.session import CSRF_COOKIE, CsrfChecked, new_csrf, set_cookies, valid_token_shape

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)

LAPSED = "Your session ended: the token expired or was revoked. Sign in again."
HOW = ("Paste a Berth API token: `berth console` prints one for you (on the machine that ran `berth up`, "
       "or wherever `berth login` was run); administrators mint one for a user with "
       "`berth login --user NAME --print-token`.")


@router.get("")
@router.get("/")
async def front_door() -> Response:
    return redirect("/ui/catalog")


def _form(request: Request, error: str | None = None, status_code: int = 200) -> Response:
    csrf = request.cookies.get(CSRF_COOKIE) or new_csrf()
    lapsed = LAPSED if request.query_params.get("lapsed") else None
    response = html(request, "signin.html", status_code, error=error or lapsed, how=HOW, csrf=csrf)
    if request.cookies.get(CSRF_COOKIE) != csrf:
        set_cookies(request, response, request.cookies.get("berth_session"), csrf)
    return response


@router.get("/signin")
async def signin_form(request: Request) -> Response:
    return _form(request)


@router.post("/signin", dependencies=[CsrfChecked])
async def signin(request: Request) -> Response:
    form = await request.form()
    token = str(form.get("token", "")).strip()
    if not valid_token_shape(token):
        return _form(request, "That is not a Berth token: paste the whole token, one line.", 400)
    async with api_as(request.app, token) as api:
        try:
            await api.whoami()
        except AuthenticationError as error:
            return _form(request, f"The token was refused: {error}", 401)
    response = redirect("/ui/catalog")
    set_cookies(request, response, token, new_csrf())  # a fresh CSRF token: none chosen before sign-in survives
    return response


@router.post("/signout", dependencies=[CsrfChecked])
async def signout(request: Request) -> Response:
    response = redirect("/ui/signin")
    set_cookies(request, response, None, new_csrf())
    return response
