"""Issue 29, finding 1: a copy is reached through Berth on the OpenAI routes only.

vLLM's key guards only /v1, /v2, /inference and /cohere; the simulator now serves vLLM's other routes with
the same key rule, so the first test shows what a copy's port exposes. The endpoint proxy (under uvicorn on
loopback, in front of a recording copy) and the model gateway add the copy key to what they forward: they
forward the OpenAI routes on a canonical path and refuse the rest in one line, before anything reaches the
copy. A copy's ranks bind the node's cluster address, never 0.0.0.0 (tests/workflows, the rank specs)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.security import SigningKey, TokenVerifier
from gateway.endpoint.endpoint_proxy import EndpointProxy
from gateway.models.model_gateway import ModelGateway
from simulator.cli import EngineConfig
from simulator.server import create_app
from tests.gateway.pool_copies import Copy, PoolRoutes, serving

pytestmark = pytest.mark.timeout(60)
KEY = "copy-key-123"
UNGUARDED = ["tokenize", "detokenize", "invocations", "pooling", "score", "classify", "rerank", "ping"]
# What a stranger tried through the proxy (the finding's list), and the refusal each gets.
AROUND = [("tokenize", 404), ("detokenize", 404), ("invocations", 404), ("pooling", 404), ("score", 404),
          ("classify", 404), ("rerank", 404), ("metrics", 404), ("v1/../tokenize", 400), ("v1/./models", 400),
          ("v1//chat/completions", 400), ("v1/chat/completions/..", 400), ("v1%2F..%2Ftokenize", 400)]


async def test_the_simulated_copy_answers_vllms_routes_outside_v1_without_its_key() -> None:
    app = create_app(EngineConfig(model="m", served_model_names=("m",), api_key=KEY))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://copy") as copy:
        chat = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
        assert (await copy.post("/v1/chat/completions", json=chat)).status_code == 401  # the key's prefix
        assert (await copy.post("/invocations", json=chat)).json()["object"] == "chat.completion"
        tokens = (await copy.post("/tokenize", json={"prompt": "hello there"})).json()
        assert tokens["count"] == 2
        assert (await copy.post("/detokenize", json={"tokens": tokens["tokens"]})).status_code == 200
        assert (await copy.post("/pooling", json={"input": "x"})).status_code == 501
        assert (await copy.get("/ping")).status_code == 200


async def _raw_post(url: str, path: str) -> tuple[int, dict[str, Any]]:
    """POST `path` byte for byte (an HTTP client would resolve `..` and `//` before sending)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = b'{"model": "m", "prompt": "x"}'
    writer.write(b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                 b"connection: close\r\n\r\n%b" % (path.encode(), host.encode(), len(body), body))
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(payload)["error"]


async def test_the_endpoint_proxy_forwards_only_the_openai_routes(tmp_path: Path) -> None:
    copy = await Copy("c1").start()
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(PoolRoutes([copy]), TokenVerifier.from_jwks(key.jwks()))  # type: ignore[arg-type]
    await proxy.refresh()
    try:
        async with serving(proxy) as url, httpx.AsyncClient(timeout=10) as client:
            base = f"{url}/endpoints/ep-1"
            for rest, status in AROUND:
                answered, error = await _raw_post(url, f"/endpoints/ep-1/{rest}")  # as sent: no client tidies it
                assert answered == status, (rest, error)
                assert error["code"] == ("route_not_served" if status == 404 else "path_not_canonical")
                assert "\n" not in error["message"] and "/v1/chat/completions" in error["message"]
            assert copy.seen == [], "a refused path reached the copy"
            for rest in ("v1/chat/completions", "v1/completions", "v1/embeddings", "v1/responses"):
                assert (await client.post(f"{base}/{rest}", json={"model": "m"})).status_code == 200, rest
            assert [path for path, _ in copy.seen] == [b"/v1/chat/completions", b"/v1/completions",
                                                       b"/v1/embeddings", b"/v1/responses"]
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        copy.close()


async def _gateway_answer(gateway: ModelGateway, path: str) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b'{"model": "m", "prompt": "x"}', "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await gateway({"type": "http", "path": path, "method": "POST", "headers": [], "query_string": b""},
                  receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])["error"]


@pytest.mark.parametrize("path", ["/tokenize", "/invocations", "/pooling", "/v1/../tokenize", "/rerank"])
async def test_the_model_gateway_refuses_what_is_not_an_openai_route(path: str) -> None:
    gateway = ModelGateway(PoolRoutes([]))  # type: ignore[arg-type]
    try:
        status, error = await _gateway_answer(gateway, path)
        assert status in (400, 404) and error["code"] in ("route_not_served", "path_not_canonical"), error
        # An OpenAI route goes on to the model lookup (no pool serves `m` here: LiteLLM's 400 for a model).
        status, error = await _gateway_answer(gateway, "/v1/completions")
        assert status == 400 and "route" not in str(error["code"])
    finally:
        await gateway.upstream.aclose()


def test_the_unguarded_routes_are_the_ones_the_simulator_serves() -> None:
    paths = {route.path.strip("/") for route in create_app(EngineConfig(model="m", served_model_names=("m",))).routes}
    assert set(UNGUARDED) <= paths
