"""Users and groups: the users the API lists for the signed-in user, and for administrators the forms that
create a user, a group and a membership, and everyone's API tokens with a revoke button each. Whether a
change is allowed is the API's call: a refusal is shown in its own words above the forms."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.errors import BerthError
from console.pages.form_values import form_text
from console.render import page, redirect
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)


async def _people_page(request: Request, session: Session, status_code: int = 200, error: str | None = None,
                       typed: dict[str, str] | None = None) -> Response:
    users = await session.api.users()
    tokens = await session.api.tokens() if session.user.admin else []
    return page(request, session, "users.html", status_code, users=users, tokens=tokens, error=error,
                typed=typed or {})


def _field(form: dict[str, str], name: str) -> str:
    return form.get(name, "").strip()


async def _change(request: Request, session: Session, form_name: str) -> Response:
    """Apply one form's change through the API; on a refusal, the page again with what was typed."""
    form = await form_text(request)
    org = _field(form, "org") or "default"
    try:
        if form_name == "user":
            groups = [g.strip() for g in form.get("groups", "").split(",") if g.strip()]
            await session.api.create_user(_field(form, "name"), org, groups, form.get("admin") == "on")
        elif form_name == "group":
            await session.api.create_group(_field(form, "name"), org)
        elif form_name == "member":
            await session.api.add_member(_field(form, "group"), _field(form, "user"))
        else:
            await session.api.revoke_token(_field(form, "token_id"))
    except BerthError as error:
        typed = {f"{form_name}-{key}": value for key, value in form.items() if key != "csrf"}
        return await _people_page(request, session, error.http_status, str(error), typed)
    return redirect("/ui/users")


@router.get("/users")
async def users(request: Request, session: Signed) -> Response:
    return await _people_page(request, session)


@router.post("/users", dependencies=[CsrfChecked])
async def create_user(request: Request, session: Signed) -> Response:
    return await _change(request, session, "user")


@router.post("/groups", dependencies=[CsrfChecked])
async def create_group(request: Request, session: Signed) -> Response:
    return await _change(request, session, "group")


@router.post("/groups/members", dependencies=[CsrfChecked])
async def add_member(request: Request, session: Signed) -> Response:
    return await _change(request, session, "member")


@router.post("/tokens/revoke", dependencies=[CsrfChecked])
async def revoke_token(request: Request, session: Signed) -> Response:
    return await _change(request, session, "token")
