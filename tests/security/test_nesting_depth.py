"""Issue 29, finding 7: a JSON body nested 100,000 deep gave the endpoint proxy a 500 with a RecursionError
traceback. Every parse of a request body in the endpoint proxy (the limits, an API key's model, the prompt's
session key, LiteLLM's /key/ routes), the model gateway and the API is bounded (berth/bounded_parse.py: 64 levels):
a 400 in one line, nothing forwarded, no traceback, nothing logged with the body. In process: the real proxy,
gateway and API apps through httpx's ASGI transport (copies on loopback where routing must scrape them)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import KeyLimits, KeyVerdict, RoutesTable, limit_policy_from
from berth.security import Identity, SigningKey, TokenVerifier
from gateway.edge import routing
from gateway.endpoint.counters import MemoryCounters
from gateway.endpoint.endpoint_proxy import EndpointProxy
from gateway.endpoint.limits import Limiter
from gateway.models.model_gateway import ModelGateway, Pool
from server.app import build_context, create_app
from server.store.tables import EndpointRow, WorkflowRow
from tests.gateway.endpoint.test_endpoint_proxy_identity import RecordingUpstream
from tests.gateway.pool_copies import Copy, PoolRoutes

pytestmark = pytest.mark.timeout(60)
DEEP = b"[" * 100_000 + b"]" * 100_000
# Deep enough for the bound, shallow enough that json.loads reads it: the bound, not the interpreter, refuses.
DEEPER_THAN_THE_BOUND = b'{"model": "m", "messages": ' + b"[" * 200 + b"]" * 200 + b"}"
REFUSAL = "The request body nests JSON deeper than 64 levels; send a flatter document."
KEY = "bk_0123456789ab_" + "k" * 43
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)


class FakeApi:
    """The control plane as the proxy sees it: one public endpoint, and a key scoped to model `m`."""

    def __init__(self, endpoints: list[dict[str, Any]]) -> None:
        self.endpoints = endpoints

    async def routes(self) -> RoutesTable:
        return RoutesTable.model_validate({"endpoints": self.endpoints})

    async def verify_key(self, _request: Any) -> KeyVerdict:
        return KeyVerdict(key_id="key-1", owner="alice", org="acme", groups=[], endpoint_id="ep-1", model="m",
                          limits=KeyLimits())

    async def append_audit(self, _batch: Any) -> None:
        pass

    async def aclose(self) -> None:
        pass


PUBLIC = {"id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [], "service": "vllm",
          "copy_urls": ["http://127.0.0.1:9"]}


async def _post(app: Any, url: str, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        return await client.post(url, content=body, headers={"content-type": "application/json", **(headers or {})})


def _refused_in_one_line(response: httpx.Response, caplog: pytest.LogCaptureFixture) -> None:
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["message"] == REFUSAL and "\n" not in response.text
    assert "[[[[" not in caplog.text and "Traceback" not in caplog.text and "RecursionError" not in caplog.text


@pytest.mark.parametrize("body", [DEEP, DEEPER_THAN_THE_BOUND], ids=["100000-deep", "200-deep"])
async def test_the_limits_step_refuses_a_deep_body(tmp_path: Path, body: bytes, caplog: pytest.LogCaptureFixture
                                                   ) -> None:
    upstream = RecordingUpstream()
    limiter = Limiter(limit_policy_from({"max_prompt_tokens": 1000}, "the test"), MemoryCounters())  # reads bodies
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(FakeApi([PUBLIC]), TokenVerifier.from_jwks(key.jwks()), upstream=upstream,  # type: ignore[arg-type]
                          limiter=limiter)
    with caplog.at_level(logging.DEBUG):
        response = await _post(proxy, "/endpoints/ep-1/v1/chat/completions", body)
    _refused_in_one_line(response, caplog)
    assert response.json()["error"]["code"] == "nesting_depth" and upstream.seen == []


@pytest.mark.parametrize("body", [DEEP, DEEPER_THAN_THE_BOUND], ids=["100000-deep", "200-deep"])
async def test_a_model_scoped_key_check_refuses_a_deep_body(tmp_path: Path, body: bytes,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    upstream = RecordingUpstream()
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(FakeApi([PUBLIC]), TokenVerifier.from_jwks(key.jwks()), upstream=upstream)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG):
        response = await _post(proxy, "/endpoints/ep-1/v1/chat/completions", body, {"authorization": f"Bearer {KEY}"})
    _refused_in_one_line(response, caplog)
    assert upstream.seen == []


async def test_the_session_key_refuses_a_deep_body(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Two idle copies: the proxy reads the prompt to keep it on one of them (gateway/endpoint/session_key.py).
    copies = [await Copy(name).start() for name in ("c1", "c2")]
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(PoolRoutes(copies), TokenVerifier.from_jwks(key.jwks()))  # type: ignore[arg-type]
    try:
        await proxy.refresh()
        with caplog.at_level(logging.DEBUG):
            response = await _post(proxy, "/endpoints/ep-1/v1/chat/completions", DEEP)
        _refused_in_one_line(response, caplog)
        assert [copy.seen for copy in copies] == [[], []]
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        for copy in copies:
            copy.close()


async def test_the_model_gateway_refuses_a_deep_body(caplog: pytest.LogCaptureFixture) -> None:
    upstream = RecordingUpstream()
    gateway = ModelGateway(PoolRoutes([]), upstream=upstream)  # type: ignore[arg-type]
    pool = Pool(endpoint_id="e1", workflow_id="wf", model_id="m", policy=routing.make("least_queue"))
    pool.replicas["c1"] = routing.Replica(copy_id="c1", url="http://c1",
                                          metrics=routing.ReplicaMetrics(scraped_at=time.monotonic()))
    gateway.pools["e1"] = pool
    with caplog.at_level(logging.DEBUG):
        response = await _post(gateway, "/v1/chat/completions", DEEP)
    _refused_in_one_line(response, caplog)
    assert upstream.seen == []


# The key routes read 64 KiB at most: 20,000 levels still overflow json.loads' recursion.
@pytest.mark.parametrize("body", [b"[" * 20_000 + b"]" * 20_000, DEEPER_THAN_THE_BOUND], ids=["20000-deep", "200-deep"])
async def test_litellms_key_routes_refuse_a_deep_body(tmp_path: Path, body: bytes) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    master = "sk-generated-master-key-0123456789"
    context.store.ensure_user("alice", org="acme", groups=["team"])
    context.store.add_workflow(
        WorkflowRow(id="wf-lite", entry="vllm", owner="alice", org="acme", created_at=time.time(), definition="",
                    endpoint_id="ep-lite"), {"api_key": master},
        EndpointRow(id="ep-lite", workflow_id="wf-lite", service="litellm", scope="group", owner="alice", org="acme",
                    groups=["team"], model_id="m", created_at=time.time(), annotations={}))
    context.store.set_endpoint_service("ep-lite", "litellm", "http://127.0.0.1:1")
    api = ApiClient("http://api", context.signing.api_token(ADMIN),
                    transport=httpx.ASGITransport(app=create_app(context)))
    verifier = TokenVerifier.from_jwks(context.signing.jwks())
    proxy = EndpointProxy(api, verifier, upstream=RecordingUpstream())  # type: ignore[arg-type]
    async with api:
        await proxy.refresh()
        response = await _post(proxy, "/endpoints/ep-lite/key/generate", body, {"authorization": f"Bearer {master}"})
    assert response.status_code == 400, response.text[:300]
    assert REFUSAL in response.text and "\n" not in response.text


@pytest.mark.parametrize("body", [DEEP, DEEPER_THAN_THE_BOUND], ids=["100000-deep", "200-deep"])
async def test_the_api_refuses_a_deep_body_in_one_line(tmp_path: Path, body: bytes) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {context.signing.api_token(ADMIN)}"}) as api:
        for path in ("/v1/workflows", "/v1/secrets", "/v1/nodes/n1/heartbeat"):
            response = await api.post(path, content=body, headers={"content-type": "application/json"})
            assert (response.status_code, response.json()) == (400, {"detail": REFUSAL}), (path, response.text[:300])
        # A value the API parses as JSON itself (an hf secret's) is bounded the same way.
        secret = await api.post("/v1/secrets", json={"ref": "secret://user/hf", "type": "hf",
                                                     "value": "[" * 100_000})
        assert secret.status_code == 400, secret.text[:300]
        assert secret.json()["detail"] == "An hf secret nests JSON deeper than 64 levels; send a flatter document."
