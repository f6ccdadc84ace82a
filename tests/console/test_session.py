"""Signing in and out of the console, its cookies and its CSRF checks, through the real app (in-process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.security import API_AUDIENCE
from server.context import ServerContext
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    return console_context(tmp_path / "state")


async def test_a_page_without_a_session_sends_the_browser_to_sign_in(context: ServerContext) -> None:
    async with browser(context) as client:
        answer = await client.get("/ui/catalog")
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/signin"
        form = await client.get("/ui/signin")
        assert form.status_code == 200 and 'id="signin-form"' in form.text
        policy = form.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy


async def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_clears_it(context: ServerContext) -> None:
    token = user_token(context, "bob")
    async with browser(context) as client:
        signed = await sign_in(client, token)
        assert signed.status_code == 303 and signed.headers["location"] == "/ui/catalog"
        cookies = [v for k, v in signed.headers.multi_items() if k == "set-cookie"]
        session = next(c for c in cookies if c.startswith("berth_session="))
        assert "HttpOnly" in session and "SameSite=strict" in session and "Path=/ui" in session
        page = await client.get("/ui/catalog")
        assert page.status_code == 200 and '<span id="whoami"' in page.text and ">bob<" in page.text
        assert "GPT-OSS 20B" in page.text and "Users</a>" not in page.text  # bob is no administrator
        out = await client.post("/ui/signout", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303 and out.headers["location"] == "/ui/signin"
        assert (await client.get("/ui/catalog")).status_code == 303


async def test_a_refused_token_shows_the_api_words_and_sets_no_session(context: ServerContext) -> None:
    async with browser(context) as client:
        answer = await sign_in(client, "not-a-token")
        assert answer.status_code == 401 and 'role="alert"' in answer.text and "refused" in answer.text
        assert "berth_session" not in client.cookies
        huge = await sign_in(client, "x" * 5000)
        assert huge.status_code == 400 and "not a Berth token" in huge.text


async def test_a_post_without_the_csrf_token_or_from_another_site_is_refused(context: ServerContext) -> None:
    token = user_token(context, "admin")
    async with browser(context) as client:
        await sign_in(client, token)
        page = await client.get("/ui/catalog")
        csrf = csrf_of(page.text)
        missing = await client.post("/ui/signout", data={})
        assert missing.status_code == 403 and "CSRF" in missing.text
        foreign = await client.post("/ui/signout", data={"csrf": csrf}, headers={"Origin": "http://evil.test"})
        assert foreign.status_code == 403 and "another site" in foreign.text
        cross = await client.post("/ui/signout", data={"csrf": csrf}, headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
        header = await client.post("/ui/signout", headers={"X-CSRF-Token": csrf})  # what htmx sends
        assert header.status_code == 303


async def test_a_revoked_token_ends_the_session(context: ServerContext) -> None:
    token = user_token(context, "bob")
    async with browser(context) as client:
        await sign_in(client, token)
        assert (await client.get("/ui/catalog")).status_code == 200
        context.tokens.revoke_presented(context.store.identity("bob"), context.verifier.verify(token, API_AUDIENCE))
        lapsed = await client.get("/ui/catalog")
        assert lapsed.status_code == 303 and lapsed.headers["location"] == "/ui/signin?lapsed=1"
        again = await client.get(lapsed.headers["location"])
        assert "Your session ended" in again.text
