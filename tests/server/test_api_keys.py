"""API keys through the real API and store in process: create (TTL capped), list without the hash,
verify (another endpoint or model → 403, revoked → 401), rotation overlap, and the quota's reservations."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from berth.contracts import AuditBatch, AuditRecord
from berth.security import API_AUDIENCE
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")
    with context.store.session() as s:
        for endpoint_id in ("ep-a", "ep-b"):
            s.add(EndpointRow(id=endpoint_id, workflow_id="wf", service="vllm", scope="group", owner="admin",
                              org="default", groups=["default"], created_at=time.time(), annotations={}))
    return context


async def test_a_key_is_created_verified_rotated_and_revoked(context: ServerContext) -> None:
    admin = context.store.identity("admin")
    token = context.signing.api_token(admin, 600)
    context.verifier.verify(token, API_AUDIENCE)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        too_long = await api.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a", "ttl": "91d"})
        assert too_long.status_code == 400 and "key_max_ttl" in too_long.json()["detail"]
        made = await api.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a", "model": "m",
                                                "request_quota": 2})
        assert made.status_code == 201, made.text
        key, key_id = made.json()["key"], made.json()["record"]["id"]
        assert key.startswith("bk_")
        listed = (await api.get("/v1/keys")).text
        assert key_id in listed and "hash" not in listed and key.split("_", 2)[2] not in listed

        async def verify(presented: str, endpoint: str = "ep-a", model: str | None = "m") -> httpx.Response:
            return await api.post("/v1/internal/keys/verify",
                                  json={"key": presented, "endpoint_id": endpoint, "model": model})

        assert (await verify(key)).json()["owner"] == "admin"
        other = await verify(key, endpoint="ep-b")
        assert other.status_code == 403 and "for endpoint ep-a" in other.json()["detail"]
        assert (await verify(key, model="other")).status_code == 403
        rotated = (await api.post(f"/v1/keys/{key_id}/rotate", json={"overlap": "1s"})).json()["key"]
        assert (await verify(key)).status_code == 200 and (await verify(rotated)).status_code == 200
        deadline = time.monotonic() + 10
        while (await verify(key)).status_code == 200 and time.monotonic() < deadline:
            await api.get("/v1/keys")  # the overlap ends by the clock; nothing to wait on but it
        assert (await verify(key)).status_code == 401
        grants = [(await api.post(f"/v1/internal/keys/{key_id}/reserve", json={"requests": 1})).json()["granted"]
                  for _ in range(3)]
        assert grants == [1, 1, 0]
        assert (await api.delete(f"/v1/keys/{key_id}")).json()["state"] == "revoked"
        assert (await verify(rotated)).status_code == 401


async def test_a_key_for_a_model_the_endpoint_does_not_serve_is_refused_at_creation(context: ServerContext) -> None:
    """Issue 31, item 9: every request of such a key was a 403; now its creation says why, in one line."""
    with context.store.session() as s:
        s.add(EndpointRow(id="ep-m", workflow_id="wf-m", service="vllm", scope="group", owner="admin",
                          org="default", groups=["default"], created_at=time.time(), annotations={},
                          model_id="org/served"))
    token = context.signing.api_token(context.store.identity("admin"), 600)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        refused = await api.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-m", "model": "other/model"})
        detail = refused.json()["detail"]
        assert refused.status_code == 400 and "serves org/served, not other/model" in detail and "\n" not in detail
        for model in ("org/served", None):
            made = await api.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-m", "model": model})
            assert made.status_code == 201, made.text


async def test_a_key_without_a_quota_still_counts_its_requests(context: ServerContext) -> None:
    """Issue 31, item 9: `key describe` said `0 of unlimited` for a key that had served requests (only quota
    reservations were counted). The audit chain records every request a key makes; describe counts them."""
    token = context.signing.api_token(context.store.identity("admin"), 600)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        key_id = (await api.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a"})).json()["record"]["id"]
        other = (await api.post("/v1/keys", json={"name": "o", "endpoint_id": "ep-a"})).json()["record"]["id"]
        now = time.time()

        def phase(request: str, name: str, key: str, status: int = 0) -> dict[str, object]:
            return {"at": now, "phase": name, "request_id": request, "status": status, "key_id": key,
                    "user": "admin", "endpoint_id": "ep-a"}
        records = [phase("r1", "ATTEMPT", key_id), phase("r1", "SUCCESS", key_id, 200),
                   phase("r2", "ATTEMPT", key_id), phase("r2", "FAILED", key_id, 429),
                   phase("r3", "ATTEMPT", key_id), phase("r3", "SUCCESS", key_id, 200),
                   phase("r4", "ATTEMPT", other), phase("r4", "SUCCESS", other, 200)]
        batch = AuditBatch.of("proxy-a", 1, [AuditRecord.model_validate(record) for record in records])
        assert (await api.post("/v1/internal/audit", json=batch.model_dump(mode="json"))).status_code == 200
        described = (await api.get(f"/v1/keys/{key_id}")).json()
        assert described["requests"] == {"made": 3, "answered": 2}
        assert described["limits"]["request_quota"] is None
        assert all(record.get("requests") is None for record in (await api.get("/v1/keys")).json())


def test_key_describe_says_what_a_key_did_beside_its_quota() -> None:
    from berth.contracts import KeyLimits, KeyRecord, KeyRequests
    from cli.key import _requests

    record = KeyRecord(id="k1", prefix="p", name="k", owner="a", org="o", groups=[], endpoint_id="ep",
                       created_at=0.0, limits=KeyLimits(), state="active", requests=KeyRequests(made=3, answered=2))
    assert _requests(record) == "3 made, 2 answered; no quota"
    quota = record.model_copy(update={"limits": KeyLimits(request_quota=100, requests_used=32)})
    assert _requests(quota) == "3 made, 2 answered; quota 32 of 100 reserved"
