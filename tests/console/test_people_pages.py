"""The users page over the real app (in-process): administrators create users, groups and memberships and
revoke tokens; a refusal shows the API's words with what was typed kept; bob gets no forms and the API's
refusal if he posts anyway."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.tokens import TokenRecord
from server.context import ServerContext
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    return console_context(tmp_path / "state")


async def test_an_administrator_creates_a_user_a_group_and_a_membership(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        page = (await client.get("/ui/users")).text
        assert all(f'id="{form}"' in page for form in ("user-form", "group-form", "member-form"))
        assert 'tr data-id="bob"' in page
        csrf = csrf_of(page)
        made = await client.post("/ui/users", data={"csrf": csrf, "name": "carol", "org": "default",
                                                    "groups": "default, ml", "admin": "on"})
        assert made.status_code == 303, made.text
        group = await client.post("/ui/groups", data={"csrf": csrf, "name": "vision", "org": "default"})
        assert group.status_code == 303, group.text
        member = await client.post("/ui/groups/members", data={"csrf": csrf, "group": "vision", "user": "bob"})
        assert member.status_code == 303, member.text
        listed = (await client.get("/ui/users")).text
        assert context.store.identity("carol").admin and "vision" in context.store.identity("bob").groups
        assert 'tr data-id="carol"' in listed


async def test_a_refusal_keeps_what_was_typed(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        csrf = csrf_of((await client.get("/ui/users")).text)
        refused = await client.post("/ui/groups/members", data={"csrf": csrf, "group": "no-such", "user": "bob"})
        assert refused.status_code >= 400 and 'id="people-error" class="error" role="alert"' in refused.text
        assert 'id="member-group" name="group" value="no-such"' in refused.text


async def test_an_administrator_revokes_a_token(context: ServerContext) -> None:
    bob = user_token(context, "bob")
    async with browser(context) as client:
        await sign_in(client, bob)  # bob's token is recorded at its first use
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        page = (await client.get("/ui/users")).text
        assert 'id="tokens"' in page
        bobs = [t for t in _tokens(context) if t.user == "bob" and t.state == "active"]
        assert bobs and f'name="token_id" value="{bobs[0].id}"' in page
        revoked = await client.post("/ui/tokens/revoke", data={"csrf": csrf_of(page), "token_id": bobs[0].id})
        assert revoked.status_code == 303, revoked.text
    async with browser(context) as client:
        assert (await sign_in(client, bob)).status_code == 401


def _tokens(context: ServerContext) -> list[TokenRecord]:
    return context.tokens.records(context.store.identity("admin"), None)


async def test_bob_gets_no_forms_and_the_api_refusal(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/users")).text
        assert 'id="user-form"' not in page and 'href="/ui/users"' not in page and 'class="notice"' in page
        refused = await client.post("/ui/users", data={"csrf": csrf_of(page), "name": "mallory"})
        assert refused.status_code == 403 and 'role="alert"' in refused.text
