"""An endpoint's policy through the real API and store in process: its owner tightens the cluster's limits
(the routes table carries the override) but cannot loosen them (403 naming the field and the cluster's
value), an administrator may; other users are refused as the endpoint guards refuse; a TTL cap refuses a
longer API key naming the endpoint; clearing leaves the pool facts beside it. On SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from berth.contracts import LimitPolicy
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow

CLUSTER = {"user": {"requests_per_minute": 100}, "max_tokens": 4096, "context_check": True}
POOL_FACTS = {"pool": True, "routing_policy": "least_queue", "max_context": 8192}



@pytest.fixture
def context(tmp_path: Path, store_url: str) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1", database_url=store_url)  # SQLite, then PostgreSQL
    context.limits = LimitPolicy.model_validate(CLUSTER)  # as BERTH_LIMITS_FILE would give it
    context.store.ensure_user("alice", org="default", groups=["default"])
    context.store.ensure_user("bob", org="default", groups=["default"])  # in the endpoint's scope
    context.store.ensure_user("carol", org="other", groups=["other"])  # outside it
    with context.store.session() as s:
        s.add(EndpointRow(id="ep-a", workflow_id="wf", service="vllm", scope="group", owner="alice",
                          org="default", groups=["default"], created_at=time.time(), annotations=dict(POOL_FACTS)))
    return context


@asynccontextmanager
async def api_as(context: ServerContext, user: str) -> AsyncIterator[httpx.AsyncClient]:
    token = context.signing.api_token(context.store.identity(user), 600)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        yield api


async def routed_limits(context: ServerContext) -> object:
    async with api_as(context, "admin") as admin:
        table = (await admin.get("/v1/internal/routes")).json()
    return next(e for e in table["endpoints"] if e["id"] == "ep-a").get("limits")


def stored(context: ServerContext) -> dict[str, object]:
    return dict(context.store.endpoint("ep-a").annotations)


async def test_the_owner_tightens_and_the_proxies_are_sent_it(context: ServerContext) -> None:
    async with api_as(context, "alice") as alice:
        assert (await alice.get("/v1/endpoints/ep-a/policy")).json() == {"limits": None, "key_max_ttl": None}
        tighter = {"limits": {"max_tokens": 1024, "session": {"concurrent": 2}, "body_limit_bytes": 65536}}
        answer = await alice.put("/v1/endpoints/ep-a/policy", json=tighter)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {**tighter, "key_max_ttl": None}  # only the fields the override sets
        assert (await alice.get("/v1/endpoints/ep-a/policy")).json() == answer.json()
    assert await routed_limits(context) == tighter["limits"]
    assert stored(context) == {**POOL_FACTS, "limits": tighter["limits"]}


@pytest.mark.parametrize(("limits", "named"), [
    ({"max_tokens": 8192}, "max_tokens: 8192 is looser than the cluster's 4096"),
    ({"max_tokens": None}, "max_tokens: null (off) is looser than the cluster's 4096"),
    ({"body_limit_bytes": None}, "body_limit_bytes: null (off) is looser than the cluster's 1048576"),
    ({"context_check": False}, "context_check: the cluster turns it on"),
    ({"user": {"requests_per_minute": 200}}, "user.requests_per_minute: the cluster counts it across every "
                                             "endpoint (100)"),
    # Even a lower number: counted per endpoint, it would replace the cluster's count across endpoints.
    ({"user": {"requests_per_minute": 50}}, "user.requests_per_minute"),
])
async def test_the_owner_cannot_loosen_an_administrator_can(context: ServerContext, limits: dict[str, object],
                                                            named: str) -> None:
    async with api_as(context, "alice") as alice:
        refused = await alice.put("/v1/endpoints/ep-a/policy", json={"limits": limits})
    assert refused.status_code == 403
    detail = refused.json()["detail"]
    assert named in detail and "\n" not in detail and "owner may only tighten" in detail
    assert await routed_limits(context) is None and stored(context) == POOL_FACTS
    async with api_as(context, "admin") as admin:
        assert (await admin.put("/v1/endpoints/ep-a/policy", json={"limits": limits})).status_code == 200
    assert await routed_limits(context) == limits
    async with api_as(context, "alice") as alice:  # the owner may keep the administrator's limits as they are
        kept = await alice.put("/v1/endpoints/ep-a/policy", json={"limits": limits, "key_max_ttl": "7d"})
        assert kept.status_code == 200, kept.text
    assert await routed_limits(context) == limits


async def test_other_users_are_refused_as_the_endpoint_guards_refuse(context: ServerContext) -> None:
    body = {"limits": {"max_tokens": 10}}
    async with api_as(context, "bob") as bob:  # in scope: may see the policy, not change it
        assert (await bob.get("/v1/endpoints/ep-a/policy")).status_code == 200
        refused = await bob.put("/v1/endpoints/ep-a/policy", json=body)
        assert refused.status_code == 403 and "owner of endpoint ep-a (alice)" in refused.json()["detail"]
        assert (await bob.delete("/v1/endpoints/ep-a/policy")).status_code == 403
    async with api_as(context, "carol") as carol:  # outside its scope: it does not exist for her
        for method in ("GET", "PUT", "DELETE"):
            answer = await carol.request(method, "/v1/endpoints/ep-a/policy",
                                         json=body if method == "PUT" else None)
            assert answer.status_code == 404, (method, answer.text)
    assert stored(context) == POOL_FACTS


async def test_a_key_ttl_cap_refuses_longer_keys_naming_the_endpoint_and_clear_lifts_it(
        context: ServerContext) -> None:
    async with api_as(context, "alice") as alice:
        assert (await alice.put("/v1/endpoints/ep-a/policy", json={"key_max_ttl": "0d"})).status_code == 400
        assert (await alice.put("/v1/endpoints/ep-a/policy", json={"key_max_ttl": "soon"})).status_code == 422
        set_ = await alice.put("/v1/endpoints/ep-a/policy",
                               json={"key_max_ttl": "7d", "limits": {"max_tokens": 2048}})
        assert set_.json() == {"limits": {"max_tokens": 2048}, "key_max_ttl": "7d"}
        longer = await alice.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a", "ttl": "8d"})
        assert longer.status_code == 400 and "endpoint ep-a" in longer.json()["detail"]
        made = await alice.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a", "ttl": "7d"})
        assert made.status_code == 201, made.text
        cleared = await alice.delete("/v1/endpoints/ep-a/policy")
        assert cleared.json() == {"limits": None, "key_max_ttl": None}
        assert (await alice.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a", "ttl": "8d"})).status_code == 201
    assert stored(context) == POOL_FACTS and await routed_limits(context) is None


async def test_replacing_clears_what_the_body_leaves_out(context: ServerContext) -> None:
    async with api_as(context, "alice") as alice:
        await alice.put("/v1/endpoints/ep-a/policy", json={"key_max_ttl": "7d", "limits": {"max_tokens": 10}})
        answer = await alice.put("/v1/endpoints/ep-a/policy", json={"key_max_ttl": "1d"})
    assert answer.json() == {"limits": None, "key_max_ttl": "1d"}
    assert stored(context) == {**POOL_FACTS, "key_max_ttl": "1d"}


def test_the_api_reads_the_cluster_limits_the_proxies_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("max_tokens: 100\n")
    monkeypatch.setenv("BERTH_LIMITS_FILE", str(limits))
    assert build_context(tmp_path / "state", "127.0.0.1:1").limits.max_tokens == 100
