"""The endpoint pages over the real app (in-process, no Temporal: the workflow and its endpoint are written
to the store the way a start writes them): the list in the user's scope, the facts, a generated token shown
once in the POST's own answer, and the snippets carrying it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from berth.security import Identity
from console.snippets import api_base
from server.context import ServerContext
from server.store.tables import EndpointRow
from server.submission import StartRequest, new_rows, prepare, with_generated_keys
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token

ENTRY = "SmolLM2 135M Instruct"


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = console_context(tmp_path / "state")
    # A CPU node, so the submission's capacity check passes.
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "vllm-cpu", "cpus": 8,
                                            "memory_gb": 32, "gpus": []}, port_start=30000)
    return context


def start(context: ServerContext, who: Identity, values: dict[str, object]) -> str:
    """What start_workflow writes to the store, without Temporal; the endpoint's id."""
    entry, definition = prepare(context, StartRequest(entry=ENTRY, values=values), who)
    definition = with_generated_keys(definition)
    row, endpoint = new_rows(entry, definition, who)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    return endpoint.id


def test_the_api_base_gets_v1_once() -> None:
    assert api_base("http://h/endpoints/ep-1") == "http://h/endpoints/ep-1/v1"
    assert api_base("http://h/endpoints/ep-1/v1/") == "http://h/endpoints/ep-1/v1"


async def test_an_empty_list_says_what_to_do(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/endpoints")).text
        assert 'class="empty"' in page and "Catalog" in page


async def test_bob_does_not_see_the_admin_user_scoped_endpoint(context: ServerContext) -> None:
    mine = start(context, context.store.identity("admin"), {"Scope": "user", "Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        listed = (await client.get("/ui/endpoints")).text
        assert f'tr data-id="{mine}"' in listed and "/ui/workflows/" in listed
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        assert mine not in (await client.get("/ui/endpoints")).text
        refused = await client.get(f"/ui/endpoints/{mine}")
        assert refused.status_code in (403, 404) and 'role="alert"' in refused.text


async def test_the_endpoint_page_shows_facts_and_snippets_with_the_env_token(context: ServerContext) -> None:
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get(f"/ui/endpoints/{endpoint_id}")).text
        url = re.search(r'id="endpoint-url">([^<]+)<', page)
        assert url and url.group(1).endswith(f"/endpoints/{endpoint_id}")
        assert 'id="endpoint-scope"' in page and 'id="endpoint-ready"' in page
        assert 'id="token-form"' in page and '<option selected>8h</option>' in page
        for name in ("curl", "python", "opencode"):
            assert f'<pre id="snippet-{name}">' in page and f'data-copy="#snippet-{name}"' in page
        assert f"{url.group(1)}/v1/chat/completions" in page and "Bearer $BERTH_TOKEN" in page
        assert 'os.environ[&#34;BERTH_TOKEN&#34;]' in page and "{env:BERTH_TOKEN}" in page
        assert 'id="token-value"' not in page


async def test_a_generated_token_is_shown_once_in_the_answer_and_in_the_snippets(context: ServerContext) -> None:
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        csrf = csrf_of((await client.get(f"/ui/endpoints/{endpoint_id}")).text)
        answer = await client.post(f"/ui/endpoints/{endpoint_id}/token", data={"csrf": csrf, "expiration": "1h"})
        assert answer.status_code == 200 and "location" not in answer.headers
        assert answer.headers["cache-control"] == "no-store"
        token = re.search(r'<input id="token-value" value="([^"]+)" readonly>', answer.text)
        assert token and 'button type="button" class="copy" data-copy="#token-value"' in answer.text
        assert f"Bearer {token.group(1)}" in answer.text and "$BERTH_TOKEN" not in answer.text.split("Call it")[1]
        assert '<option selected>1h</option>' in answer.text
        # Shown once: the page read again holds no token.
        assert token.group(1) not in (await client.get(f"/ui/endpoints/{endpoint_id}")).text
        odd = await client.post(f"/ui/endpoints/{endpoint_id}/token", data={"csrf": csrf, "expiration": "99y"})
        assert odd.status_code == 400 and 'id="token-error" class="error" role="alert"' in odd.text
        forged = await client.post(f"/ui/endpoints/{endpoint_id}/token", data={"csrf": "x", "expiration": "1h"})
        assert forged.status_code == 403 and 'id="token-value"' not in forged.text


async def test_an_https_endpoint_says_how_to_trust_a_private_ca(context: ServerContext) -> None:
    context.settings = context.settings.model_copy(update={"proxy_url": "https://berth.example:8443"})
    endpoint_id = start(context, context.store.identity("bob"), {"Proxy": "false"})
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get(f"/ui/endpoints/{endpoint_id}")).text
        assert "https://berth.example:8443/endpoints/" in page
        assert "--cacert" in page and "CURL_CA_BUNDLE" in page and "NODE_EXTRA_CA_CERTS" in page


async def test_an_endpoint_without_client_facts_still_shows_curl_and_python(context: ServerContext) -> None:
    with context.store.session() as s:  # an endpoint row with no workflow definition behind it
        s.add(EndpointRow(id="ep-bare", workflow_id="wf-gone", service="vllm", scope="group", owner="admin",
                          org="default", groups=["default"], created_at=time.time(), annotations={}))
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/endpoints/ep-bare")).text
        assert 'id="snippet-curl"' in page and "MODEL_ID" in page and "Client facts:" in page
        assert 'id="snippet-opencode"' not in page and "no opencode.json can be written" in page
