"""The typed contracts pin the wire: `/openapi.json` documents a response model for every route that answers
with a body, and representative answers of the routes (those that need no Temporal) are byte for byte what
the same route sent before it declared its model, and validate against that model and read back, through
`berth.contracts.wire` (what the CLI's `-o json` prints), to the same bytes."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter

import server.app
from berth import contracts
from berth.contracts import ReserveRequest, wire
from berth.security import Identity
from berth.tokens import RevokeResult, TokenRecord
from catalog.entry import load_catalog
from node.inventory import simulated_gpus
from server.app import build_context, create_app
from server.context import ServerContext
from server.routes import ROUTERS
from server.store.tables import EndpointRow, WorkflowRow

# In team-a: an endpoint token is minted only inside the endpoint's scope, an administrator's too (the seeded
# endpoints are team-a's).
ADMIN = Identity(user="admin", groups=("default", "team-a"), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team-a",), org="acme")
NO_TEMPORAL = "127.0.0.1:1"  # no route below reaches Temporal


def _untyped_routers() -> tuple[APIRouter, ...]:
    """The same routers with every route's response model taken away: each route answers what its
    function returns, encoded as FastAPI did before the routes declared their models."""
    untyped = []
    for router in ROUTERS:
        bare = APIRouter()
        for route in router.routes:
            assert isinstance(route, APIRoute)
            bare.add_api_route(route.path, route.endpoint, methods=list(route.methods), status_code=route.status_code,
                               dependencies=route.dependencies, response_model=None, name=route.name)
        untyped.append(bare)
    return tuple(untyped)


def _seed(context: ServerContext, logs: Path) -> None:
    """Two pools (Proxy=false with a ready and a draining copy, Proxy=true), a workflow with a log, and
    users: what the listings below show."""
    store = context.store
    with store.session() as session:
        for endpoint_id, proxy in (("ep-direct", False), ("ep-proxied", True)):
            session.add(EndpointRow(
                id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="litellm" if proxy else "vllm",
                scope="group", owner="alice", org="acme", groups=["team-a"], model_id="Qwen/Qwen3-0.6B",
                created_at=time.time(), annotations={"pool": True, "proxy": proxy, "routing_policy": "least_queue"}))
        session.add(WorkflowRow(id="wf-ep-direct", entry="vllm", owner="alice", org="acme", created_at=time.time(),
                                definition="", endpoint_id="ep-direct"))
    store.upsert_replica("wf-ep-direct", "ep-direct", "wf-ep-direct.copy-0", "http://10.0.0.1:8000", ready=True)
    store.upsert_replica("wf-ep-direct", "ep-direct", "wf-ep-direct.copy-1", "http://10.0.0.2:8000", ready=True,
                         draining=True)
    store.ensure_user("alice", org="acme", groups=["team-a"], admin=False)
    log = logs / "wf-ep-direct.copy-0" / "vllm-rank-0.log"
    log.parent.mkdir(parents=True)
    log.write_text("INFO started\nINFO serving\n")


def _inventory(node_id: str) -> dict[str, Any]:
    return {"address": "127.0.0.1", "engine": "simulator", "gpus": simulated_gpus("2x80GB", node_id),
            "gpu_source": "simulated", "cpus": 8, "memory_gb": 64.0, "labels": {"zone": "a"}, "taints": [],
            "volumes": [], "port_start": 30000, "held": []}


@pytest.fixture
async def apis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
               ) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, ServerContext]]:
    context = build_context(tmp_path, NO_TEMPORAL)
    _seed(context, context.state.workflow_logs("wf-ep-direct"))
    headers = {"Authorization": f"Bearer {context.signing.api_token(ADMIN)}"}
    typed = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                              headers=headers)
    monkeypatch.setattr(server.app, "ROUTERS", _untyped_routers())
    before = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                               headers=headers)
    async with typed, before:
        yield typed, before, context


async def test_openapi_documents_a_response_model_for_every_route(tmp_path: Path) -> None:
    app = create_app(build_context(tmp_path, NO_TEMPORAL))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
        schema = (await api.get("/openapi.json")).json()
    components = schema["components"]["schemas"]
    undocumented = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            code, answer = next((c, a) for c, a in operation["responses"].items() if c.startswith("2"))
            if code == "204":
                assert "content" not in answer, (method, path)
                continue
            if set(answer.get("content", {})) == {"text/plain"}:  # /metrics: Prometheus's text format, a string
                assert answer["content"]["text/plain"]["schema"] == {"type": "string"}, (method, path)
                continue
            body = answer.get("content", {}).get("application/json", {}).get("schema", {})
            ref = (body.get("items") if body.get("type") == "array" else body).get("$ref", "")
            if ref.removeprefix("#/components/schemas/") not in components:
                undocumented.append(f"{method.upper()} {path}: {body}")
    assert not undocumented, undocumented


# (method, path, JSON body, the model the route declares, how the two apps' answers compare: "bytes", the
# same; "shape", the same keys in the same order and the same types (a freshly signed token, a new name);
# "alone", not at all (the first call changed what a second one answers, e.g. revoked every token)).
Call = tuple[str, str, dict[str, Any] | None, Any, str]


# What the app without models is asked instead where the same request twice would be refused (409).
TWINS = {"/v1/groups": {"name": "team-c", "org": "acme"}}


def _calls(context: ServerContext) -> list[Call]:
    entry = next(e for e in load_catalog().values() if e.model is not None)
    reserve = ReserveRequest(workflow_id="wf-ep-direct", copy_id="wf-ep-direct.copy-2", nodes=1,
                             gpus_per_node=1).model_dump(mode="json")
    return [
        ("POST", "/v1/nodes/n0/heartbeat", _inventory("n0"), contracts.NodeState, "bytes"),
        ("POST", "/v1/internal/reservations", reserve, contracts.ReserveResult, "bytes"),
        ("POST", "/v1/internal/service-ports", {"workflow_id": "wf-ep-direct", "owner": "wf-ep-direct.litellm"},
         contracts.FrontPort, "shape"),
        ("GET", "/v1/nodes", None, list[contracts.NodeView], "bytes"),
        ("POST", "/v1/nodes/n0/drain", None, contracts.NodeState, "bytes"),
        ("POST", "/v1/nodes/n0/undrain", None, contracts.NodeState, "bytes"),
        ("GET", "/healthz", None, contracts.Health, "bytes"),
        ("GET", "/.well-known/jwks.json", None, contracts.Jwks, "bytes"),
        ("GET", "/v1/internal/keys", None, contracts.Jwks, "bytes"),
        ("GET", "/v1/catalog", None, list[contracts.EntrySummary], "bytes"),
        ("GET", f"/v1/catalog/entry?name={entry.name}", None, contracts.EntryDetail, "bytes"),
        ("GET", "/v1/endpoints", None, list[contracts.EndpointView], "bytes"),
        ("GET", "/v1/endpoints/ep-direct", None, contracts.EndpointView, "bytes"),
        ("GET", "/v1/endpoints/ep-proxied", None, contracts.EndpointView, "bytes"),
        ("POST", "/v1/endpoints/ep-direct/tokens", {"expiration": "1h"}, contracts.EndpointToken, "shape"),
        ("GET", "/v1/workflows/wf-ep-direct/logs", None, contracts.WorkflowLogs, "bytes"),
        ("GET", "/v1/workflows/wf-ep-direct/logs?job=vllm-rank-0", None, contracts.WorkflowLogs, "bytes"),
        ("GET", "/v1/whoami", None, contracts.UserView, "bytes"),
        ("GET", "/v1/users", None, list[contracts.UserView], "bytes"),
        ("POST", "/v1/groups", {"name": "team-b", "org": "acme"}, contracts.GroupView, "shape"),
        ("POST", "/v1/groups/team-b/members", {"user": "alice"}, contracts.UserView, "bytes"),
        ("POST", "/v1/users/alice/tokens", {"expiration": "1h", "note": "ci"}, contracts.MintedToken, "shape"),
        ("GET", "/v1/tokens", None, list[TokenRecord], "bytes"),
        ("POST", "/v1/users/alice/tokens/revoke-all", None, RevokeResult, "alone"),
        ("POST", "/v1/secrets", {"ref": "secret://user/KEY", "type": "value", "value": "sk-1"},
         contracts.SecretCreated, "bytes"),
        ("GET", "/v1/secrets", None, list[contracts.SecretView], "bytes"),
        ("POST", "/v1/internal/secrets/resolve", {"ref": "secret://user/KEY", "user": "admin"},
         contracts.ResolvedSecret, "bytes"),
        ("POST", "/v1/internal/endpoints/ep-proxied/service-token", None, contracts.ServiceToken, "shape"),
        ("POST", "/v1/internal/users/alice/tokens", {"endpoint_id": "ep-direct", "ttl_s": 600},
         contracts.OwnerToken, "shape"),
        ("POST", "/v1/internal/users/alice/replica-keys-token", None, contracts.ReplicaKeysToken, "shape"),
        ("GET", "/v1/internal/replica-keys", None, contracts.ReplicaKeysList, "bytes"),
        ("GET", "/v1/internal/endpoints/ep-proxied/replicas", None, contracts.ServiceCopies, "bytes"),
        ("GET", "/v1/internal/routes", None, contracts.RoutesTable, "bytes"),
    ]


def _skeleton(value: Any) -> Any:
    """The keys (in order) and value types of a JSON document, without the values."""
    if isinstance(value, dict):
        return [(key, _skeleton(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_skeleton(item) for item in value]
    return type(value).__name__


def _reads_back(model: Any, answer: httpx.Response) -> bytes:
    """The answer validated as `model`, written back as the CLI's `-o json` writes it."""
    read: BaseModel | list[BaseModel] = TypeAdapter(model).validate_json(answer.content)
    return json.dumps(wire(read), separators=(",", ":"), ensure_ascii=False).encode()


async def test_representative_answers_are_unchanged_and_read_back_exactly(
        apis: tuple[httpx.AsyncClient, httpx.AsyncClient, ServerContext]) -> None:
    typed, before, context = apis
    for method, path, body, model, compare in _calls(context):
        new = await typed.request(method, path, json=body)
        assert new.is_success, (path, new.status_code, new.text[:300])
        if compare != "alone":
            old = await before.request(method, path, json=TWINS.get(path, body))
            assert old.status_code == new.status_code, (path, old.status_code, old.text[:300])
            if compare == "bytes":
                assert new.content == old.content, (path, new.text, old.text)
            else:
                assert _skeleton(new.json()) == _skeleton(old.json()), path
        assert _reads_back(model, new) == new.content, path


async def test_the_listings_show_what_the_seeded_store_holds(
        apis: tuple[httpx.AsyncClient, httpx.AsyncClient, ServerContext]) -> None:
    """The typed answers carry the facts, not empty defaults: the pool's draining copy, the GPU facts the
    agent reported, the key a Proxy=true pool's LiteLLM reads."""
    typed, _before, context = apis
    await typed.post("/v1/nodes/n0/heartbeat", json=_inventory("n0"))
    direct = contracts.EndpointView.model_validate((await typed.get("/v1/endpoints/ep-direct")).json())
    assert [(r.copy_id, r.draining) for r in direct.copies] == [("wf-ep-direct.copy-0", False),
                                                                ("wf-ep-direct.copy-1", True)]
    assert direct.ready_copies == 1 and direct.annotations.discoverable
    proxied = contracts.EndpointView.model_validate((await typed.get("/v1/endpoints/ep-proxied")).json())
    assert proxied.copies == [] and proxied.annotations.not_discoverable_reason
    (node,) = TypeAdapter(list[contracts.NodeView]).validate_json((await typed.get("/v1/nodes")).content)
    assert [(g.index, g.simulated, g.uuid, g.allocated_to) for g in node.gpus] == [
        (0, True, "SIM-n0-0", None), (1, True, "SIM-n0-1", None)]
    table = contracts.RoutesTable.model_validate((await typed.get("/v1/internal/routes")).json())
    pool = {entry.id: entry for entry in table.endpoints}["ep-direct"].pool
    assert [r.api_key for r in pool] == [context.replica_keys.for_copy(r.copy_id) for r in pool]
    assert "sk-" not in repr(pool)  # a copy's key never reaches a log line


async def test_renamed_fields_are_answered_under_their_old_names_too(
        apis: tuple[httpx.AsyncClient, httpx.AsyncClient, ServerContext]) -> None:
    """For one release a caller of the previous one (a running pool's LiteLLM sync hook, a script reading
    `-o json`) still finds `replicas`, `ready_replicas` and a copy's `id`, with the same values."""
    typed, _before, _context = apis
    direct = (await typed.get("/v1/endpoints/ep-direct")).json()
    assert direct["replicas"] == direct["copies"] and len(direct["copies"]) == 2
    assert direct["ready_replicas"] == direct["ready_copies"] == 1
    listing = (await typed.get("/v1/internal/endpoints/ep-proxied/replicas")).json()
    assert listing["replicas"] == listing["copies"]
    (entry,) = [e for e in (await typed.get("/v1/internal/routes")).json()["endpoints"] if e["id"] == "ep-direct"]
    assert entry["replicas"] == entry["copy_urls"] == ["http://10.0.0.1:8000"]
    read = contracts.ServiceCopies.model_validate(
        {"replicas": [{"id": "wf-1.copy-0", "url": "http://a/v1", "ready": True}]})  # the previous release's body
    assert [(c.copy_id, c.ready) for c in read.copies] == [("wf-1.copy-0", True)]
    assert read.model_dump(mode="json")["copies"][0]["id"] == "wf-1.copy-0"
    counters = contracts.RequestCounters.model_validate({"pid": 1, "started_at": 0.0, "requests_total": 3,
                                                        "replicas": ["wf-1.copy-0"]})
    assert counters.copies == ("wf-1.copy-0",)
