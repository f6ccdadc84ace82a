"""The secrets page over the real app (in-process): names and types only, create and delete, the API's
refusal shown with the reference kept — and the value in no answer, ever."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.context import ServerContext
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token

VALUE = "sk-do-not-show-me-4242"


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    return console_context(tmp_path / "state")


async def test_secrets_are_created_listed_without_values_and_deleted(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        empty = (await client.get("/ui/secrets")).text
        assert 'class="empty"' in empty and 'id="secret-form"' in empty and 'type="password"' in empty
        made = await client.post("/ui/secrets", data={"csrf": csrf_of(empty), "ref": "secret://user/openai",
                                                      "type": "value", "value": VALUE})
        assert made.status_code == 303 and VALUE not in made.text
        listed = (await client.get("/ui/secrets")).text
        assert 'tr data-id="secret://user/openai"' in listed and "<td>value</td>" in listed and VALUE not in listed
        gone = await client.post("/ui/secrets/delete", data={"csrf": csrf_of(listed), "ref": "secret://user/openai"})
        assert gone.status_code == 303
        assert "secret://user/openai" not in (await client.get("/ui/secrets")).text


async def test_a_refused_secret_shows_the_api_words_and_never_the_value(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        csrf = csrf_of((await client.get("/ui/secrets")).text)
        bad_ref = await client.post("/ui/secrets", data={"csrf": csrf, "ref": "nope", "type": "value",
                                                         "value": VALUE})
        assert bad_ref.status_code == 400 and 'id="secret-error" class="error" role="alert"' in bad_ref.text
        assert "is not a secret reference" in bad_ref.text and 'value="nope"' in bad_ref.text
        assert VALUE not in bad_ref.text
        bad_hf = await client.post("/ui/secrets", data={"csrf": csrf, "ref": "secret://user/hf", "type": "hf",
                                                        "value": VALUE})
        assert bad_hf.status_code == 400 and "hf secret" in bad_hf.text and VALUE not in bad_hf.text
        assert "<option selected>hf</option>" in bad_hf.text


async def test_bob_does_not_see_the_admin_user_secret(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        csrf = csrf_of((await client.get("/ui/secrets")).text)
        await client.post("/ui/secrets", data={"csrf": csrf, "ref": "secret://user/mine", "type": "value",
                                               "value": VALUE})
        assert "secret://user/mine" in (await client.get("/ui/secrets")).text
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        assert "secret://user/mine" not in (await client.get("/ui/secrets")).text
