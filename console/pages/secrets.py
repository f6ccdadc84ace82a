"""Secret pages: the secrets the user may see, by name and type only (the API never answers a value), a
form to create one and a delete form per row. A refused create keeps the reference and type typed, never
the value: a value is sent once, to the API, and never written into a page."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.errors import BerthError
from console.render import page, redirect
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
TYPES = ("value", "hf")


async def _secrets_page(request: Request, session: Session, status_code: int = 200, error: str | None = None,
                        ref: str = "", kind: str = "value") -> Response:
    return page(request, session, "secrets.html", status_code, secrets=await session.api.secrets(), types=TYPES,
                error=error, ref=ref, kind=kind)


@router.get("/secrets")
async def secrets(request: Request, session: Signed) -> Response:
    return await _secrets_page(request, session)


@router.post("/secrets", dependencies=[CsrfChecked])
async def create_secret(request: Request, session: Signed) -> Response:
    form = await request.form()
    ref, kind, value = (str(form.get(name, "")) for name in ("ref", "type", "value"))
    try:
        await session.api.create_secret(ref.strip(), kind, value)
    except BerthError as error:
        return await _secrets_page(request, session, error.http_status, str(error), ref, kind)
    return redirect("/ui/secrets")


@router.post("/secrets/delete", dependencies=[CsrfChecked])
async def delete_secret(request: Request, session: Signed) -> Response:
    ref = str((await request.form()).get("ref", ""))
    try:
        await session.api.delete_secret(ref)
    except BerthError as error:
        return await _secrets_page(request, session, error.http_status, str(error))
    return redirect("/ui/secrets")
