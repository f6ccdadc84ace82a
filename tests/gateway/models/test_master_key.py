"""The discovering gateway's master key (issue 13 item 3) against a real loopback copy: forged or
misdirected caller assertions are refused, and the master key never reaches a copy — another user
owns it, and would hold the gateway's key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from berth.api_client import ApiClient
from berth.security import Identity, SigningKey
from gateway.edge.master_key import MasterKeyGate
from gateway.models.model_gateway import ModelGateway

MASTER_KEY = "sk-gateway-master-0123456789abcdef"
COPY_KEY = "sk-berth-replica-copy1"
ENDPOINT = "ep-gateway"
MODEL = "Qwen/Qwen3-0.6B"
ALICE = Identity("alice", ("team-a",), "acme")


class Copy:
    """A loopback model server that answers /metrics and records the headers of each POST."""

    def __init__(self) -> None:
        self.posts: list[dict[str, str]] = []
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in head[1:] if ":" in line}
        await reader.readexactly(int(headers.get("content-length", "0")))
        if head[0].startswith("POST"):
            self.posts.append(headers)
        body = b"vllm:num_requests_running 0\n" if " /metrics " in head[0] else b'{"ok": true}'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()


@pytest.fixture
async def world(tmp_path: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Copy, SigningKey]]:
    key = SigningKey.load_or_create(tmp_path)
    copy = Copy()
    server = await asyncio.start_server(copy._serve, "127.0.0.1", 0)
    copy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    # An endpoint as GET /v1/endpoints answers it (berth.contracts.EndpointView).
    endpoints = [{"id": "ep-qwen", "workflow_id": "wf-qwen", "service": "vllm", "url": "http://proxy/endpoints/ep-qwen",
                  "scope": "user", "owner": "alice", "model_id": MODEL, "ready": True, "ready_replicas": 1,
                  "replicas": [{"copy_id": "copy1", "url": copy.url, "ready": True, "draining": False}],
                  "annotations": {"model_id": MODEL, "workflow_id": "wf-qwen", "owner": "alice", "scope": "user",
                                  "ready": True, "discoverable": True, "routing_policy": None}}]

    def api(request: httpx.Request) -> httpx.Response:
        answers = {"/v1/endpoints": endpoints, "/v1/internal/replica-keys": {"keys": {"copy1": COPY_KEY}},
                   "/.well-known/jwks.json": key.jwks()}
        return httpx.Response(200, json=answers[request.url.path])

    client = ApiClient("http://api.test", "owner-token", transport=httpx.MockTransport(api))
    gateway = ModelGateway(client, gate=MasterKeyGate(MASTER_KEY, ENDPOINT, client.jwks))
    await gateway.refresh()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as http:
        yield http, copy, key
    server.close()
    await gateway.upstream.aclose()
    await client.aclose()


async def _chat(http: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    return await http.post("/v1/chat/completions", headers=headers, json={"model": MODEL, "messages": []})


async def test_the_master_key_never_reaches_a_copy(world: tuple[httpx.AsyncClient, Copy, SigningKey]) -> None:
    http, copy, _key = world
    for headers in ({"Authorization": f"Bearer {MASTER_KEY}"}, {"x-litellm-api-key": MASTER_KEY},
                    {"api-key": MASTER_KEY}, {"x-api-key": MASTER_KEY}):
        reply = await _chat(http, headers)
        assert reply.status_code == 200, reply.text
    assert len(copy.posts) == 4
    for seen in copy.posts:
        assert MASTER_KEY not in json.dumps(seen)
        assert seen["authorization"] == f"Bearer {COPY_KEY}"  # the copy's own key, nothing else


async def test_only_a_genuine_assertion_for_this_gateway_admits_without_a_key(
        world: tuple[httpx.AsyncClient, Copy, SigningKey], tmp_path: Any) -> None:
    http, copy, key = world
    forger = SigningKey.load_or_create(tmp_path / "forger")
    refused = {
        "forged": forger.caller_assertion(ALICE, ENDPOINT),
        "another endpoint's": key.caller_assertion(ALICE, "ep-other"),
        "an API token": key.api_token(ALICE),
        "garbage": "not-a-jwt",
    }
    for what, assertion in refused.items():
        reply = await _chat(http, {"x-berth-caller": assertion})
        assert reply.status_code == 401, what
        assert reply.json()["error"]["message"] == "Authentication Error, No api key passed in.", what
    assert copy.posts == []
    admitted = await _chat(http, {"x-berth-caller": key.caller_assertion(ALICE, ENDPOINT)})
    assert admitted.status_code == 200, admitted.text
    assert "x-berth-caller" not in copy.posts[0]


async def test_an_oversized_or_berth_token_key_is_never_the_master_key(
        world: tuple[httpx.AsyncClient, Copy, SigningKey]) -> None:
    http, copy, key = world
    oversized = await _chat(http, {"x-litellm-api-key": MASTER_KEY + "x" * 10_000})
    assert oversized.status_code == 401
    assert oversized.json()["error"]["message"] == "Authentication Error, Invalid proxy server token passed"
    # A Berth token is not a LiteLLM key: with no key and no assertion it is LiteLLM's "no key" 401.
    berth = await _chat(http, {"Authorization": f"Bearer {key.api_token(ALICE)}"})
    assert berth.status_code == 401
    assert berth.json()["error"]["message"] == "Authentication Error, No api key passed in."
    assert copy.posts == []
