"""The API key pages over the real app (in-process; endpoints are rows in the store, as in
tests/server/test_api_keys.py): a key's secret appears in the answer that made it (create, rotate) and in
no other page, the API's refusals beside the form, CSRF on every POST, and each user seeing only theirs."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from server.context import ServerContext
from server.store.tables import EndpointRow
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = console_context(tmp_path / "state")
    with context.store.session() as s:
        for endpoint_id in ("ep-a", "ep-b"):
            s.add(EndpointRow(id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="vllm", scope="group",
                              owner="admin", org="default", groups=["default"], created_at=time.time(),
                              annotations={}))
    return context


async def create(client: httpx.AsyncClient, **fields: str) -> httpx.Response:
    csrf = csrf_of((await client.get("/ui/keys")).text)
    return await client.post("/ui/keys", data={"csrf": csrf, **fields})


def bearer(context: ServerContext, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user_token(context, user)}"}


def shown_key(page: str) -> str:
    found = re.search(r'<input id="key-value" readonly value="(bk_[^"]+)"', page)
    assert found, "the answer shows no key"
    return found.group(1)


def key_row(page: str, key_id: str) -> str:
    found = re.search(rf'<tr data-id="{key_id}">(.*?)</tr>', page, re.S)
    assert found, f"no row for {key_id}"
    return found.group(1)


async def test_a_secret_is_shown_once_on_create_and_on_rotate(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        empty = (await client.get("/ui/keys")).text
        assert 'class="empty">No API keys yet' in empty and '<option value="ep-a"' in empty
        made = await create(client, name="ci", endpoint_id="ep-b", model="m", ttl="12h", request_quota="5")
        assert made.status_code == 200 and "shown once" in made.text
        assert 'button type="button" class="copy" data-copy="#key-value"' in made.text
        secret = shown_key(made.text)
        key_id = (await client.get("/v1/keys", headers=bearer(context, "admin"))).json()[0]["id"]
        row = key_row(made.text, key_id)
        assert "ep-b" in row and ">m<" in row and "0 of 5" in row and ">active<" in row
        listed = (await client.get("/ui/keys")).text
        assert f'tr data-id="{key_id}"' in listed and secret not in listed and secret.split("_", 2)[2] not in listed
        assert 'id="key-value"' not in listed
        rotated = await client.post(f"/ui/keys/{key_id}/rotate", data={"csrf": csrf_of(listed), "overlap": "5m"})
        assert rotated.status_code == 200 and "Rotated API key" in rotated.text and "previous secret" in rotated.text
        new_secret = shown_key(rotated.text)
        assert new_secret != secret and secret not in rotated.text
        later = (await client.get("/ui/keys")).text
        assert new_secret not in later and secret not in later
        revoked = await client.post(f"/ui/keys/{key_id}/revoke", data={"csrf": csrf_of(later)})
        assert revoked.status_code == 303 and revoked.headers["location"] == "/ui/keys"
        row = key_row((await client.get("/ui/keys")).text, key_id)
        assert ">revoked<" in row and "rotate-form" not in row and "revoke-form" not in row


async def test_refusals_show_the_api_words_and_keep_the_values(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        too_long = await create(client, name="long", endpoint_id="ep-a", ttl="91d")
        assert too_long.status_code == 400 and 'id="key-error" class="error" role="alert">' in too_long.text
        assert "key_max_ttl" in too_long.text and 'value="long"' in too_long.text and 'value="91d"' in too_long.text
        assert '<option value="ep-a" selected>' in too_long.text and 'id="key-value"' not in too_long.text
        zero = await create(client, name="z", endpoint_id="ep-a", request_quota="0")
        assert zero.status_code == 400 and "Request quota (0): Input should be greater than or equal to 1." in zero.text
        unknown = await client.post("/ui/keys/no-such-key/rotate", data={"csrf": csrf_of(zero.text)})
        assert unknown.status_code == 404 and 'id="action-error"' in unknown.text
        assert (await client.get("/v1/keys", headers=bearer(context, "bob"))).json() == []


async def test_every_post_needs_the_csrf_token(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        forged = await client.post("/ui/keys", data={"name": "x", "endpoint_id": "ep-a"})
        assert forged.status_code == 403 and "CSRF" in forged.text and "bk_" not in forged.text
        assert (await client.get("/v1/keys", headers=bearer(context, "bob"))).json() == []
        assert (await create(client, name="x", endpoint_id="ep-a")).status_code == 200
        key_id = (await client.get("/v1/keys", headers=bearer(context, "bob"))).json()[0]["id"]
        for action in ("rotate", "revoke"):
            refused = await client.post(f"/ui/keys/{key_id}/{action}", data={"csrf": "wrong"})
            assert refused.status_code == 403 and 'id="key-value"' not in refused.text
        assert (await client.get("/v1/keys", headers=bearer(context, "bob"))).json()[0]["state"] == "active"


async def test_bob_does_not_see_admins_keys(context: ServerContext) -> None:
    async with browser(context) as admin, browser(context) as bob:
        await sign_in(admin, user_token(context, "admin"))
        await sign_in(bob, user_token(context, "bob"))
        assert (await create(admin, name="admins", endpoint_id="ep-a")).status_code == 200
        assert (await create(bob, name="bobs", endpoint_id="ep-a")).status_code == 200
        keys = {k["name"]: k["id"] for k in (await admin.get("/v1/keys", headers=bearer(context, "admin"))).json()}
        bobs_page = (await bob.get("/ui/keys")).text
        assert f'data-id="{keys["bobs"]}"' in bobs_page and f'data-id="{keys["admins"]}"' not in bobs_page
        assert "admins" not in bobs_page
        refused = await bob.post(f"/ui/keys/{keys['admins']}/revoke", data={"csrf": csrf_of(bobs_page)})
        assert refused.status_code == 404 and 'id="action-error"' in refused.text
        admins_page = (await admin.get("/ui/keys")).text  # an administrator sees everyone's, with the owner
        assert f'data-id="{keys["bobs"]}"' in admins_page and "<td>bob</td>" in admins_page
