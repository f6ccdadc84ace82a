"""Endpoint tokens through the real API and store in process (issue 31, item 10): each one minted is recorded
by id (never the token); the endpoint's owner and administrators list and revoke them all, anyone else in its
scope only their own; revoking is idempotent, an unknown id a 404 in one line; the routes table carries the
revoked ids of unexpired tokens only; and the OpenAPI document states what the routes answer and refuse."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from berth.contracts import EndpointTokenRecord, EndpointTokenRevoked, RoutesTable
from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow, EndpointTokenRow

ALICE = Identity("alice", ("team",), "acme")  # the endpoint's owner
BOB = Identity("bob", ("team",), "acme")  # in its scope
CAROL = Identity("carol", ("ops",), "acme")  # outside it
Clients = dict[str, httpx.AsyncClient]


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    for person in (ALICE, BOB, CAROL):
        context.store.ensure_user(person.user, org=person.org, groups=list(person.groups))
    with context.store.session() as s:
        for endpoint_id in ("ep-1", "ep-2"):
            s.add(EndpointRow(id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="vllm", scope="group",
                              owner="alice", org="acme", groups=["team"], created_at=time.time(), annotations={}))
    return context


@pytest.fixture
async def apis(context: ServerContext) -> AsyncIterator[Clients]:
    app = create_app(context)
    clients = {name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                       headers={"Authorization": f"Bearer {context.signing.api_token(who, 600)}"})
               for name, who in (("alice", ALICE), ("bob", BOB), ("carol", CAROL),
                                 ("admin", context.store.identity("admin")))}
    try:
        yield clients
    finally:
        for client in clients.values():
            await client.aclose()


async def _mint(api: httpx.AsyncClient, endpoint_id: str = "ep-1", **body: str) -> str:
    minted = await api.post(f"/v1/endpoints/{endpoint_id}/tokens", json={"expiration": "1h", **body})
    assert minted.status_code == 200, minted.text
    return str(minted.json()["id"])


async def _listed(api: httpx.AsyncClient, endpoint_id: str = "ep-1") -> list[EndpointTokenRecord]:
    answer = await api.get(f"/v1/endpoints/{endpoint_id}/tokens")
    assert answer.status_code == 200, answer.text
    return [EndpointTokenRecord.model_validate(item) for item in answer.json()]


async def test_minted_tokens_are_listed_by_id_never_the_token(apis: Clients) -> None:
    minted = await apis["alice"].post("/v1/endpoints/ep-1/tokens", json={"expiration": "1h", "note": "ci runner"})
    token, token_id = minted.json()["token"], minted.json()["id"]
    bob_id = await _mint(apis["bob"])
    listing = await apis["alice"].get("/v1/endpoints/ep-1/tokens")
    assert token not in listing.text and token.split(".")[2] not in listing.text
    first, second = (EndpointTokenRecord.model_validate(item) for item in listing.json())
    assert (first.id, first.user, first.minted_by, first.note, first.revoked) == (
        token_id, "alice", "alice", "ci runner", False)
    assert first.expires_at == pytest.approx(time.time() + 3600, abs=5) and first.minted_at <= time.time()
    assert (second.id, second.user) == (bob_id, "bob")
    assert [r.id for r in await _listed(apis["admin"])] == [token_id, bob_id]  # administrators: all
    assert [r.id for r in await _listed(apis["bob"])] == [bob_id]  # anyone else: their own
    assert await _listed(apis["alice"], "ep-2") == []


async def test_revoking_is_idempotent_and_reaches_the_routes_table(apis: Clients) -> None:
    alice_id, bob_id = await _mint(apis["alice"]), await _mint(apis["bob"])
    kept = await _mint(apis["alice"])
    first = await apis["bob"].delete(f"/v1/endpoints/ep-1/tokens/{bob_id}")
    revoked = EndpointTokenRevoked.model_validate(first.json())
    assert first.status_code == 200 and not revoked.already_revoked
    assert (revoked.record.revoked, revoked.record.revoked_by) == (True, "bob")
    second = await apis["bob"].delete(f"/v1/endpoints/ep-1/tokens/{bob_id}")
    again = EndpointTokenRevoked.model_validate(second.json())
    assert again.already_revoked and again.record.revoked_at == revoked.record.revoked_at
    owner = await apis["alice"].delete(f"/v1/endpoints/ep-1/tokens/{alice_id}")  # the owner may revoke any
    assert owner.status_code == 200
    table = RoutesTable.model_validate((await apis["admin"].get("/v1/internal/routes")).json())
    revoked_ids = {entry.id: entry.revoked_tokens for entry in table.endpoints}
    assert revoked_ids == {"ep-1": sorted([alice_id, bob_id]), "ep-2": None}
    assert {r.id: r.revoked for r in await _listed(apis["alice"])} == {alice_id: True, bob_id: True, kept: False}


async def test_refusals_are_one_line(apis: Clients) -> None:
    alice_id = await _mint(apis["alice"])
    for who, path in (("alice", "/v1/endpoints/ep-1/tokens/0123456789abcdef"),  # no such id
                      ("bob", f"/v1/endpoints/ep-1/tokens/{alice_id}"),  # not bob's to see
                      ("alice", f"/v1/endpoints/ep-2/tokens/{alice_id}")):  # another endpoint's
        refused = await apis[who].delete(path)
        detail = refused.json()["detail"]
        assert refused.status_code == 404 and "\n" not in detail, detail
        assert "No token with id" in detail and "`berth endpoint tokens" in detail
    outside = await apis["carol"].get("/v1/endpoints/ep-1/tokens")
    assert outside.status_code == 403 and "outside endpoint ep-1's scope" in outside.json()["detail"]
    assert (await apis["carol"].delete(f"/v1/endpoints/ep-1/tokens/{alice_id}")).status_code == 403
    assert (await apis["alice"].get("/v1/endpoints/ep-9/tokens")).status_code == 404
    assert not (await _listed(apis["alice"]))[0].revoked  # nothing a refusal touched


async def test_expired_tokens_leave_the_listing_and_the_routes_table(apis: Clients, context: ServerContext) -> None:
    token_id = await _mint(apis["alice"])
    assert (await apis["alice"].delete(f"/v1/endpoints/ep-1/tokens/{token_id}")).status_code == 200
    with context.store.session() as s:
        row = s.get(EndpointTokenRow, token_id)
        assert row is not None
        row.expires_at = time.time() - 1
    assert await _listed(apis["alice"]) == []
    table = RoutesTable.model_validate((await apis["admin"].get("/v1/internal/routes")).json())
    assert all(entry.revoked_tokens is None for entry in table.endpoints)
    # A day after it expired the row is gone, dropped when the next token is minted.
    with context.store.session() as s:
        row = s.get(EndpointTokenRow, token_id)
        assert row is not None
        row.expires_at = time.time() - 2 * 24 * 3600
    await _mint(apis["alice"])
    with context.store.session() as s:
        assert s.get(EndpointTokenRow, token_id) is None


async def test_a_services_endpoint_token_is_recorded_too(apis: Clients) -> None:
    minted = await apis["admin"].post("/v1/internal/users/alice/tokens", json={"endpoint_id": "ep-1", "ttl_s": 600})
    assert minted.status_code == 200, minted.text
    (record,) = await _listed(apis["alice"])
    assert (record.user, record.minted_by, record.note) == ("alice", "admin", "a workflow service's, as its owner")


async def test_openapi_states_what_the_token_routes_answer_and_refuse(apis: Clients) -> None:
    paths = (await apis["admin"].get("/openapi.json")).json()["paths"]
    listing = paths["/v1/endpoints/{endpoint_id}/tokens"]["get"]
    revoke = paths["/v1/endpoints/{endpoint_id}/tokens/{token_id}"]["delete"]
    refusal = {"$ref": "#/components/schemas/Refusal"}
    for operation, answer in ((listing, "EndpointTokenRecord"), (revoke, "EndpointTokenRevoked")):
        body = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert (body.get("items") or body) == {"$ref": f"#/components/schemas/{answer}"}
        for status in ("400", "401", "403", "404"):
            assert operation["responses"][status]["content"]["application/json"]["schema"] == refusal, status
