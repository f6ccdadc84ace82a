"""LiteLLM's key contract served from Berth's keys, through the real API and store in process: the master key
(a workflow's generated key, or its ApiKeySecret resolved as the owner) mints `sk-bk_…` keys owned by the
endpoint's owner and listed by `GET /v1/keys`; LiteLLM's fields map (duration capped, key_alias, one model,
max_parallel_requests, tpm_limit) or are refused in one line; info, delete (by key or alias) and regenerate
(with a grace period) act on them; a wrong master key is a 401 and a virtual key reads its own info only."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import build_context, create_app
from server.context import ServerContext
from server.store.secrets import Secrets
from server.store.tables import EndpointRow, WorkflowRow

MASTER = "sk-master-of-the-harbour"
SECRET_MASTER = "sk-master-from-a-secret"


def _endpoint(context: ServerContext, endpoint_id: str, definition: dict[str, Any], service: str = "litellm") -> None:
    workflow = WorkflowRow(id=f"wf-{endpoint_id}", entry="vllm", owner="alice", org="acme", created_at=time.time(),
                           definition="", endpoint_id=endpoint_id)
    endpoint = EndpointRow(id=endpoint_id, workflow_id=workflow.id, service=service, scope="group", owner="alice",
                           org="acme", groups=["team"], model_id="m", created_at=time.time(), annotations={})
    context.store.add_workflow(workflow, definition, endpoint)


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    context.store.ensure_user("alice", org="acme", groups=["team"])
    _endpoint(context, "ep-lite", {"api_key": MASTER})
    _endpoint(context, "ep-other", {"api_key": "sk-another-endpoint"})
    _endpoint(context, "ep-direct", {"api_key": MASTER}, service="vllm")
    Secrets(context.store).create(context.store.identity("alice"), "secret://user/lite", "value", SECRET_MASTER)
    _endpoint(context, "ep-secret", {"api_key_secret": "secret://user/lite"})
    return context


@pytest.fixture
async def api(context: ServerContext) -> AsyncIterator[httpx.AsyncClient]:
    token = context.signing.api_token(context.store.identity("admin"), 600)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


async def _call(api: httpx.AsyncClient, action: str, presented: str = MASTER, endpoint: str = "ep-lite",
                key: str | None = None, **body: Any) -> httpx.Response:
    return await api.post(f"/v1/internal/endpoints/{endpoint}/litellm-keys/{action}",
                          json={"presented": presented, "key": key, "body": body})


async def test_the_master_key_mints_a_key_the_owner_lists_and_it_can_be_regenerated_and_deleted(
        api: httpx.AsyncClient, context: ServerContext) -> None:
    made = await _call(api, "generate", key_alias="opencode", duration="1h", models=["m"],
                       max_parallel_requests=2, tpm_limit=5000, metadata={}, spend=0, rpm_limit=None)
    assert made.status_code == 200, made.text
    minted = made.json()
    assert minted["key"].startswith("sk-bk_") and minted["key_alias"] == "opencode"
    assert (minted["models"], minted["max_parallel_requests"], minted["tpm_limit"]) == (["m"], 2, 5000)
    assert minted["duration"] == "1h" and minted["expires"] and minted["user_id"] == "alice"
    assert minted["key_name"].startswith("sk-bk_") and minted["key_name"].endswith("_…")
    alice = context.signing.api_token(context.store.identity("alice"), 600)
    listed = (await api.get("/v1/keys", headers={"Authorization": f"Bearer {alice}"})).json()
    assert [(k["id"], k["name"], k["endpoint_id"], k["model"], k["state"]) for k in listed] == [
        (minted["token"], "opencode", "ep-lite", "m", "active")]
    assert listed[0]["limits"]["max_concurrent"] == 2 and listed[0]["limits"]["tokens_per_minute"] == 5000
    verdict = await api.post("/v1/internal/keys/verify",
                             json={"key": minted["key"].removeprefix("sk-"), "endpoint_id": "ep-lite", "model": "m"})
    assert verdict.status_code == 200 and verdict.json()["owner"] == "alice"

    by_master = await _call(api, "info", key=minted["key"])
    assert by_master.status_code == 200 and by_master.json()["info"]["token"] == minted["token"]
    assert by_master.json()["info"]["status"] == "active"
    by_itself = await _call(api, "info", presented=minted["key"])
    assert by_itself.status_code == 200 and by_itself.json()["key"] == minted["token"]

    again = await _call(api, "regenerate", key=minted["token"], grace_period="1h")
    assert again.status_code == 200, again.text
    fresh = again.json()["key"]
    assert fresh != minted["key"] and again.json()["token"] == minted["token"]
    assert (await _call(api, "info", presented=minted["key"])).status_code == 200  # the grace period
    gone = await _call(api, "delete", key_aliases=["opencode"])
    assert gone.status_code == 200 and gone.json() == {"deleted_keys": ["opencode"]}
    assert (await _call(api, "info", presented=fresh)).status_code == 401
    assert (await _call(api, "info", key=fresh)).json()["info"]["status"] == "revoked"


async def test_wrong_master_keys_and_other_keys_are_refused(api: httpx.AsyncClient) -> None:
    assert (await _call(api, "generate", presented="sk-wrong")).status_code == 401
    assert (await _call(api, "generate", presented="sk-another-endpoint")).status_code == 401
    assert (await _call(api, "generate", endpoint="ep-direct")).status_code == 404  # Proxy=false: no /key routes
    one = (await _call(api, "generate", key_alias="one")).json()["key"]
    two = (await _call(api, "generate", key_alias="two")).json()["key"]
    assert (await _call(api, "info", presented=one, key=two)).status_code == 403
    assert (await _call(api, "delete", presented=one, keys=[two])).status_code == 401  # only the master key
    assert (await _call(api, "info", presented=one, endpoint="ep-other")).status_code == 403
    assert (await _call(api, "delete", endpoint="ep-other", presented="sk-another-endpoint",
                        keys=[one])).status_code == 404  # not that endpoint's key
    unknown = await _call(api, "delete", keys=[one, "key-000000000000"])
    assert unknown.status_code == 404
    assert (await _call(api, "info", presented=one)).status_code == 200  # nothing was deleted


async def test_an_api_key_secret_is_the_master_key_resolved_as_the_owner(api: httpx.AsyncClient) -> None:
    assert (await _call(api, "generate", presented=MASTER, endpoint="ep-secret")).status_code == 401
    made = await _call(api, "generate", presented=SECRET_MASTER, endpoint="ep-secret")
    assert made.status_code == 200 and made.json()["duration"] == "30d"


@pytest.mark.parametrize(("body", "says"), [
    ({"max_budget": 10}, "Berth counts tokens, not money"),
    ({"soft_budget": 1.5}, "Berth counts tokens, not money"),
    ({"rpm_limit": 60}, "no requests-per-minute limit"),
    ({"metadata": {"team": "core"}}, "keep no metadata"),
    ({"models": ["a", "b"]}, "holds one model"),
    ({"team_id": "t"}, "not to LiteLLM users, teams"),
    ({"tags": ["x"]}, "tags is a LiteLLM key setting Berth does not map"),
    ({"colour": "blue"}, "Unknown field 'colour'"),
    ({"duration": "1mo"}, "no months"),
    ({"duration": "91d"}, "longer than this cluster (key_max_ttl)"),
    ({"tpm_limit": 0}, "tpm_limit must be a whole number of at least 1"),
])
async def test_fields_berth_does_not_map_are_refused_in_one_line(api: httpx.AsyncClient, body: dict[str, Any],
                                                                 says: str) -> None:
    refused = await _call(api, "generate", **body)
    assert refused.status_code == 400 and says in refused.json()["detail"], refused.text
    assert "\n" not in refused.json()["detail"]


async def test_aliases_are_unique_and_regenerate_keeps_settings(api: httpx.AsyncClient) -> None:
    assert (await _call(api, "generate", key_alias="same")).status_code == 200
    twice = await _call(api, "generate", key_alias="same")
    assert twice.status_code == 400 and "already exists" in twice.json()["detail"]
    changed = await _call(api, "regenerate", key_alias="other", key=None)
    assert changed.status_code == 400 and "/key/regenerate keeps the key's settings" in changed.json()["detail"]
    nameless = await _call(api, "regenerate")
    assert nameless.status_code == 400 and "No key passed in" in nameless.json()["detail"]
    assert (await _call(api, "delete")).status_code == 400
    assert (await _call(api, "info")).status_code == 400  # the master key is not a virtual key
