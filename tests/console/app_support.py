"""The console over an in-process control plane (no Temporal): an httpx client that behaves like a browser
on the same origin (cookies kept, the Origin a console page would send), and tokens for two users."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext
from server.submission import StartRequest, new_rows, prepare, with_generated_keys

ORIGIN = "http://console.test"
ENTRY = "SmolLM2 135M Instruct"  # a CPU entry: a node with no GPU passes the submission's capacity check


def console_context(state: Path) -> ServerContext:
    context = build_context(state, "127.0.0.1:1")
    context.store.ensure_user("bob", org="default", groups=["default"], admin=False)
    return context


def browser(context: ServerContext) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url=ORIGIN,
                             headers={"Origin": ORIGIN}, follow_redirects=False)


def user_token(context: ServerContext, name: str) -> str:
    return context.signing.api_token(context.store.identity(name), 600)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, token: str) -> httpx.Response:
    form = await client.get("/ui/signin")
    return await client.post("/ui/signin", data={"token": token, "csrf": csrf_of(form.text)})


def start(context: ServerContext, who: Identity, values: dict[str, object]) -> str:
    """What start_workflow writes to the store, without Temporal; the endpoint's id."""
    entry, definition = prepare(context, StartRequest(entry=ENTRY, values=values), who)
    definition = with_generated_keys(definition)
    row, endpoint = new_rows(entry, definition, who)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    return endpoint.id
