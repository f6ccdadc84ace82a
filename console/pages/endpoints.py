"""Endpoint pages: the endpoints in the user's scope, and one endpoint with its URL, scope, readiness,
copies and client facts, a form that generates an endpoint token, and snippets to call it with.

A generated token is shown once, in the answer to the POST that made it: never stored, never put in a URL
(no redirect), never cached (every console answer is no-store)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import EndpointClientFacts, EndpointToken, EndpointView
from berth.errors import BerthError
from console.pages.endpoint_history import history_view
from console.render import page
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Session, Signed
from console.snippets import snippets

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
EXPIRATIONS = ("1h", "8h", "24h", "7d", "30d")
DEFAULT_EXPIRATION = "8h"


@router.get("/endpoints")
async def endpoints(request: Request, session: Signed) -> Response:
    return page(request, session, "endpoints.html", endpoints=await session.api.endpoints())


async def _facts(session: Session, endpoint_id: str) -> tuple[EndpointClientFacts | None, str | None]:
    """The client facts, or the API's reason there are none (an endpoint that serves no model)."""
    try:
        return await session.api.endpoint_client_config(endpoint_id), None
    except BerthError as error:
        return None, str(error)


async def _endpoint_page(request: Request, session: Session, endpoint_id: str, *, status_code: int = 200,
                         token: EndpointToken | None = None, expiration: str = DEFAULT_EXPIRATION,
                         error: str | None = None) -> Response:
    endpoint: EndpointView = await session.api.endpoint_detail(endpoint_id)
    facts, facts_error = await _facts(session, endpoint_id)
    url = facts.url if facts else endpoint.url
    model = facts.model_id if facts else endpoint.model_id
    shown = snippets(url, model, facts.models if facts else [], token.token if token else None)
    recent = await history_view(session, endpoint_id)
    return page(request, session, "endpoint.html", status_code, endpoint=endpoint, facts=facts, recent=recent,
                facts_error=facts_error, url=url, snippets=shown, token=token, expirations=EXPIRATIONS,
                expiration=expiration, error=error, private_ca=url.startswith("https://"))


@router.get("/endpoints/{endpoint_id}")
async def endpoint(request: Request, session: Signed, endpoint_id: str) -> Response:
    return await _endpoint_page(request, session, endpoint_id)


@router.post("/endpoints/{endpoint_id}/token", dependencies=[CsrfChecked])
async def generate_token(request: Request, session: Signed, endpoint_id: str) -> Response:
    form = await request.form()
    expiration = str(form.get("expiration", DEFAULT_EXPIRATION))
    if expiration not in EXPIRATIONS:
        return await _endpoint_page(request, session, endpoint_id, status_code=400,
                                    error=f"Choose an expiration from {', '.join(EXPIRATIONS)}.")
    try:
        token = await session.api.generate_token(endpoint_id, expiration)
    except BerthError as error:
        return await _endpoint_page(request, session, endpoint_id, status_code=error.http_status,
                                    expiration=expiration, error=str(error))
    # The same answer shows it (no redirect): the token must not land in a URL or the history.
    return await _endpoint_page(request, session, endpoint_id, token=token, expiration=expiration)
