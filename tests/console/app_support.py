"""The console over an in-process control plane (no Temporal): an httpx client that behaves like a browser
on the same origin (cookies kept, the Origin a console page would send), and tokens for two users."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from server.app import build_context, create_app
from server.context import ServerContext

ORIGIN = "http://console.test"


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
