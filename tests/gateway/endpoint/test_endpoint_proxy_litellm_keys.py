"""LiteLLM's key routes on a LiteLLM-fronted endpoint, end to end in process: curl's calls from the OpenCode
document (`<endpoint url>/key/generate -H "Authorization: Bearer $MASTER"`) reach the real endpoint proxy,
which answers them through the typed client from the real API on a real SQLite store, in LiteLLM's JSON
shapes: generate → info → regenerate → delete, a wrong master key's 401, refused fields, and the minted key
in the owner's `GET /v1/keys`. Nothing under /key/ reaches LiteLLM (a recording stand-in), so neither does
the master key."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.api_client import ApiClient
from berth.security import Identity, TokenVerifier
from gateway.endpoint.endpoint_proxy import EndpointProxy
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow, WorkflowRow

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
MASTER = "sk-generated-master-key-0123456789"
URL = "http://proxy/endpoints/ep-lite"


class RecordingLiteLLM:
    """Stands in for the endpoint's LiteLLM (UpstreamPool's interface): records every request it is sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[tuple[bytes, bytes]]]] = []

    async def request(self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: Any) -> Any:
        self.seen.append((url, headers))
        raise AssertionError(f"{method} {url} reached LiteLLM")

    async def aclose(self) -> None:
        pass


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    context.store.ensure_user("alice", org="acme", groups=["team"])
    workflow = WorkflowRow(id="wf-lite", entry="vllm", owner="alice", org="acme", created_at=time.time(),
                           definition="", endpoint_id="ep-lite")
    endpoint = EndpointRow(id="ep-lite", workflow_id="wf-lite", service="litellm", scope="group", owner="alice",
                           org="acme", groups=["team"], model_id="m", created_at=time.time(), annotations={})
    context.store.add_workflow(workflow, {"api_key": MASTER}, endpoint)
    context.store.set_endpoint_service("ep-lite", "litellm", "http://127.0.0.1:1")
    return context


@pytest.fixture
async def proxied(context: ServerContext) -> AsyncIterator[tuple[httpx.AsyncClient, RecordingLiteLLM]]:
    api = ApiClient("http://api", context.signing.api_token(ADMIN),
                    transport=httpx.ASGITransport(app=create_app(context)))
    litellm = RecordingLiteLLM()
    proxy = EndpointProxy(api, TokenVerifier.from_jwks(context.signing.jwks()), upstream=litellm)  # type: ignore[arg-type]
    await proxy.refresh()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy),  # type: ignore[arg-type]
                                     base_url=URL) as client:
            yield client, litellm
    finally:
        await api.aclose()


def _master(key: str = MASTER) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_generate_info_regenerate_delete_as_the_document_shows(
        proxied: tuple[httpx.AsyncClient, RecordingLiteLLM], context: ServerContext) -> None:
    client, litellm = proxied
    made = await client.post(f"{URL}/key/generate", headers=_master(),
                             json={"key_alias": "opencode", "duration": "30d", "models": ["m"],
                                   "max_parallel_requests": 2, "tpm_limit": 1000})
    assert made.status_code == 200, made.text
    minted = made.json()
    for field in ("key", "key_name", "expires", "models", "token", "key_alias", "max_parallel_requests",
                  "tpm_limit", "duration"):
        assert field in minted, field
    assert minted["key"].startswith("sk-bk_") and minted["duration"] == "30d"

    # The owner sees it (as `berth key list` does) and may revoke it there.
    alice = ApiClient("http://api", context.signing.api_token(context.store.identity("alice"), 600),
                      transport=httpx.ASGITransport(app=create_app(context)))
    async with alice:
        [listed] = await alice.keys()
    assert (listed.id, listed.name, listed.endpoint_id, listed.model) == (minted["token"], "opencode", "ep-lite", "m")

    info = await client.get(f"{URL}/key/info", params={"key": minted["token"]},
                            headers={"x-litellm-api-key": MASTER})
    assert info.status_code == 200 and info.json()["info"]["key_alias"] == "opencode"
    itself = await client.get(f"{URL}/key/info", headers=_master(minted["key"]))
    assert itself.status_code == 200 and itself.json()["info"]["token"] == minted["token"]

    again = await client.post(f"{URL}/key/{minted['key']}/regenerate", headers=_master())
    assert again.status_code == 200, again.text
    fresh = again.json()["key"]
    assert fresh.startswith("sk-bk_") and fresh != minted["key"]
    assert (await client.get(f"{URL}/key/info", headers=_master(minted["key"]))).status_code == 401  # no grace
    via_body = await client.post(f"{URL}/key/regenerate", headers=_master(), json={"key": fresh})
    assert via_body.status_code == 200

    gone = await client.post(f"{URL}/key/delete", headers=_master(), json={"keys": [minted["token"]]})
    assert gone.status_code == 200 and gone.json() == {"deleted_keys": [minted["token"]]}
    async with ApiClient("http://api", context.signing.api_token(context.store.identity("alice"), 600),
                         transport=httpx.ASGITransport(app=create_app(context))) as alice:
        assert [k.state for k in await alice.keys()] == ["revoked"]
    assert litellm.seen == []


async def test_refusals_answer_in_litellm_shapes_and_reach_no_litellm(
        proxied: tuple[httpx.AsyncClient, RecordingLiteLLM]) -> None:
    client, litellm = proxied
    wrong = await client.post(f"{URL}/key/generate", headers=_master("sk-not-the-master"), json={})
    assert wrong.status_code == 401
    error = wrong.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("auth_error", "None", "401")
    assert error["message"].startswith("Authentication Error, Invalid proxy server token passed")
    none = await client.post(f"{URL}/key/generate", json={})
    assert none.status_code == 401 and none.json()["error"]["message"] == "Authentication Error, No api key passed in."

    money = await client.post(f"{URL}/key/generate", headers=_master(), json={"max_budget": 5})
    assert money.status_code == 400 and "Berth counts tokens, not money" in money.json()["error"]["message"]
    assert money.json()["error"]["type"] == "bad_request_error"
    many = await client.post(f"{URL}/key/generate", headers=_master(), json={"models": ["a", "b"]})
    assert many.status_code == 400 and "one model" in many.json()["error"]["message"]
    not_json = await client.post(f"{URL}/key/generate", headers=_master(), content=b"{nope")
    assert not_json.status_code == 400
    method = await client.get(f"{URL}/key/generate", headers=_master())
    assert method.status_code == 405
    other = await client.post(f"{URL}/key/update", headers=_master(), json={"key": "x"})
    assert other.status_code == 501 and "berth key" in other.json()["error"]["message"]
    missing = await client.post(f"{URL}/key/delete", headers=_master(), json={"keys": ["sk-bk_000000000000_x"]})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert litellm.seen == []
