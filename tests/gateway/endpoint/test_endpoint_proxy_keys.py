"""Berth API keys on the endpoint proxy, end to end in process: the real proxy under uvicorn, its key checks and
audit batches through the typed client to the real API app on a real SQLite store, in front of a copy on
loopback that records what reaches it. The OpenAI SDK and curl get answers with a `bk_` key (and LiteLLM's
`sk-bk_` form in its headers); the key never reaches the copy; another endpoint or model is a 403 body,
unknown, revoked, rotated-out or expired a 401; the request quota, max_concurrent (freed by a client that
leaves mid-stream) and tokens per minute (from streamed usage, or max_tokens without it) refuse with 429."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import uvicorn

from berth.api_client import ApiClient
from berth.contracts import AuditPhase
from berth.processes import free_port
from berth.security import Identity, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
ANSWER = (b'{"choices":[{"message":{"role":"assistant","content":"aye"}}],'
          b'"usage":{"prompt_tokens":9,"completion_tokens":1}}')
STREAM_USAGE = {"prompt_tokens": 5, "completion_tokens": 55, "total_tokens": 60}


@dataclass
class Copy:
    """A model copy on loopback: answers a completion at once (JSON, or events with the usage when asked), holds
    a stream whose prompt says `hold-me` until its client's connection goes, and records every request head."""

    heads: list[bytes] = field(default_factory=list)
    held: int = 0  # streams held open now
    metrics: bytes = b""  # what its /metrics says (the proxy scrapes it for routing and load shedding)

    def completions(self) -> list[bytes]:
        """The heads of what clients sent (not the proxy's own /metrics scrapes)."""
        return [head for head in self.heads if head.startswith(b"POST")]

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            writer.close()
            return
        self.heads.append(head)
        body = await _read_body(reader, head)
        try:
            if not head.startswith(b"POST"):  # the proxy's /metrics scrape
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: "
                             + str(len(self.metrics)).encode() + b"\r\nconnection: close\r\n\r\n" + self.metrics)
            elif json.loads(body).get("stream"):
                await self._stream(reader, writer, body)
            else:
                answer = ANSWER if b"nousage" not in body else b'{"choices":[{"message":{"content":"aye"}}]}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                             b"content-length: " + str(len(answer)).encode() + b"\r\n\r\n" + answer)
                await writer.drain()
        finally:
            writer.close()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        writer.write(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}\n\n')
        await writer.drain()
        if b"hold-me" in body:
            self.held += 1
            try:
                await asyncio.wait_for(reader.read(), 30)  # until the proxy closes the connection
            finally:
                self.held -= 1
            return
        if b"include_usage" in body:
            writer.write(b'data: {"choices":[],"usage":' + json.dumps(STREAM_USAGE).encode() + b"}\n\n")
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    lines = head.lower().split(b"\r\n")
    if b"transfer-encoding: chunked" in lines:
        parts = []
        while size := int((await reader.readline()).strip(), 16):
            parts.append(await reader.readexactly(size))
            await reader.readline()
        await reader.readline()
        return b"".join(parts)
    length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:")), 0)
    return await reader.readexactly(length)


@dataclass
class Stack:
    context: ServerContext
    proxy: EndpointProxy
    copy: Copy
    url: str  # the proxy's base
    keys: httpx.AsyncClient  # the API as alice

    async def key(self, **fields: Any) -> tuple[str, str]:
        made = await self.keys.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a", **fields})
        assert made.status_code == 201, made.text
        return made.json()["key"], made.json()["record"]["id"]

    async def chat(self, key: str, endpoint: str = "ep-a", header: str = "authorization", **extra: Any
                   ) -> httpx.Response:
        value = f"Bearer {key}" if header == "authorization" else key
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
        async with httpx.AsyncClient(timeout=30) as client:
            return await client.post(f"{self.url}/endpoints/{endpoint}/v1/chat/completions", json=body,
                                     headers={header: value})


def _publish(context: ServerContext, endpoint_id: str, url: str) -> None:
    with context.store.session() as session:
        session.add(EndpointRow(id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="vllm", scope="group",
                                owner="alice", org="acme", groups=["team"], created_at=time.time(), annotations={}))
    context.store.upsert_replica(f"wf-{endpoint_id}", endpoint_id, f"{endpoint_id}.copy-0", url, ready=True)


@contextlib.asynccontextmanager
async def _stack(tmp_path: Path) -> AsyncIterator[Stack]:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    copy = Copy()
    server = await asyncio.start_server(copy.serve, "127.0.0.1", 0)
    copy_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    for endpoint_id in ("ep-a", "ep-b"):
        _publish(context, endpoint_id, copy_url)
    app = create_app(context)
    api = ApiClient("http://api", context.signing.api_token(ADMIN), transport=httpx.ASGITransport(app=app))
    proxy = EndpointProxy(api, TokenVerifier.from_jwks(context.signing.jwks()), signer=context.signing,
                          upstream=UpstreamPool(connect_timeout_s=2))
    proxy.audit.every_s = 0.05
    proxy.audit.start()
    await proxy.refresh()
    port = free_port()
    front = uvicorn.Server(uvicorn.Config(proxy, host="127.0.0.1", port=port, http="httptools", lifespan="off",
                                          log_level="critical", access_log=False))
    serving = asyncio.create_task(front.serve())
    keys = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                             headers={"Authorization": f"Bearer {context.signing.api_token(ALICE, 600)}"})
    try:
        await _until(lambda: _true(front.started), "the proxy to start")
        yield Stack(context, proxy, copy, f"http://127.0.0.1:{port}", keys)
    finally:
        front.should_exit = True
        await asyncio.wait_for(serving, 10)
        await keys.aclose()
        await proxy.audit.aclose()
        await proxy.upstream.aclose()
        await api.aclose()
        server.close()


async def _true(value: bool) -> bool:
    return value


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        await asyncio.sleep(0.05)


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    return error


async def test_the_sdk_and_curl_get_answers_with_a_key_the_copy_never_sees_and_audit_rows_name_it(
        tmp_path: Path) -> None:
    async with _stack(tmp_path) as stack:
        key, key_id = await stack.key()
        client = openai.AsyncOpenAI(base_url=f"{stack.url}/endpoints/ep-a/v1", api_key=key, max_retries=0)
        completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await client.close()
        assert completion.choices[0].message.content == "aye"
        curl = await asyncio.create_subprocess_exec(
            "curl", "-sS", "-w", "\n%{http_code}", f"{stack.url}/endpoints/ep-a/v1/chat/completions",
            "-H", f"Authorization: Bearer {key}", "-H", "content-type: application/json",
            "-d", '{"model":"m","messages":[{"role":"user","content":"hi"}]}', stdout=asyncio.subprocess.PIPE)
        out, _ = await curl.communicate()
        body, status = out.rsplit(b"\n", 1)
        assert status == b"200" and json.loads(body)["choices"][0]["message"]["content"] == "aye"
        # LiteLLM's clients: the key in its own headers, in the sk-bk_ form its /key/generate contract mints.
        for header in ("x-api-key", "x-litellm-api-key"):
            assert (await stack.chat(f"sk-{key}", header=header)).status_code == 200
        assert len(stack.copy.completions()) == 4
        prefix, secret = key.removeprefix("bk_").split("_", 1)
        for head in stack.copy.heads:  # the scrapes too
            assert secret.encode() not in head and prefix.encode() not in head
        assert all(b"x-berth-caller:" in head.lower() for head in stack.copy.completions())  # as for a token

        async def eight_rows() -> bool:
            return len(stack.context.store.audit.list()) == 8
        await _until(eight_rows, "the audit rows")
    rows = stack.context.store.audit.list()
    assert {(row.key_id, row.user) for row in rows} == {(key_id, "alice")}
    outcomes = [(row.status, row.tokens_in, row.tokens_out) for row in rows if row.phase is not AuditPhase.ATTEMPT]
    assert outcomes == [(200, 9, 1)] * 4
    assert stack.context.store.audit.verify().ok


async def test_another_endpoint_or_model_is_a_403_and_unknown_or_revoked_keys_a_401(tmp_path: Path) -> None:
    async with _stack(tmp_path) as stack:
        key, key_id = await stack.key()
        other = await stack.chat(key, endpoint="ep-b")
        assert other.status_code == 403 and "for endpoint ep-a, not ep-b" in _error(other)["message"]
        scoped, _ = await stack.key(model="m")
        assert (await stack.chat(scoped)).status_code == 200
        wrong_model = await stack.chat(scoped, model="gpt-4")
        assert wrong_model.status_code == 403
        assert "for model 'm' only, not 'gpt-4'" in _error(wrong_model)["message"]
        unknown = await stack.chat("bk_0123456789ab_" + "x" * 43)
        assert unknown.status_code == 401 and _error(unknown)["code"] == "invalid_api_key"
        assert (await stack.keys.delete(f"/v1/keys/{key_id}")).status_code == 200

        async def refused() -> bool:  # a verdict is cached for at most 5 s
            return (await stack.chat(key)).status_code == 401
        await _until(refused, "the revoked key refused")
        assert "revoked" in _error(await stack.chat(key))["message"]


async def test_a_rotated_secret_works_through_its_overlap_and_an_expired_key_stops(tmp_path: Path) -> None:
    async with _stack(tmp_path) as stack:
        old, key_id = await stack.key()
        assert (await stack.chat(old)).status_code == 200
        rotated = await stack.keys.post(f"/v1/keys/{key_id}/rotate", json={"overlap": "2s"})
        new = rotated.json()["key"]
        assert (await stack.chat(old)).status_code == 200 and (await stack.chat(new)).status_code == 200

        async def old_refused() -> bool:  # never cached past its valid_until
            return (await stack.chat(old)).status_code == 401
        await _until(old_refused, "the old secret refused after the overlap")
        assert (await stack.chat(new)).status_code == 200

        short, _ = await stack.key(ttl="2s")
        assert (await stack.chat(short)).status_code == 200

        async def expired() -> bool:
            return (await stack.chat(short)).status_code == 401
        await _until(expired, "the key refused once expired")
        assert "expired" in _error(await stack.chat(short))["message"]


async def test_the_request_quota_admits_n_requests_and_refuses_the_next(tmp_path: Path) -> None:
    async with _stack(tmp_path) as stack:
        key, key_id = await stack.key(request_quota=3)
        assert [(await stack.chat(key)).status_code for _ in range(3)] == [200, 200, 200]
        refused = await stack.chat(key)
        assert refused.status_code == 429 and _error(refused)["code"] == "request_quota"
        assert len(stack.copy.completions()) == 3
        described = (await stack.keys.get(f"/v1/keys/{key_id}")).json()
        assert described["limits"]["requests_used"] == 3  # reserved in the store: survives a restart


async def test_max_concurrent_refuses_a_second_stream_until_the_first_client_leaves(tmp_path: Path) -> None:
    async with _stack(tmp_path) as stack:
        key, key_id = await stack.key(max_concurrent=1)
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hold-me"}]}
        async with httpx.AsyncClient(timeout=30) as client, client.stream(
                "POST", f"{stack.url}/endpoints/ep-a/v1/chat/completions", json=body,
                headers={"authorization": f"Bearer {key}"}) as held:
            assert held.status_code == 200
            async for line in held.aiter_lines():
                if line.startswith("data:"):
                    break  # the copy holds the rest
            second = await stack.chat(key)
            assert second.status_code == 429 and _error(second)["code"] == "max_concurrent"
            assert second.headers["retry-after"] == "1"
        # The client left mid-stream: its slot is free, and the copy's connection closed.

        async def slot_free() -> bool:  # a request is admitted again (a refused one counts nothing)
            return stack.copy.held == 0 and (await stack.chat(key)).status_code == 200
        await _until(slot_free, "the slot released after the client left")


async def test_tokens_per_minute_are_charged_from_streamed_usage_or_max_tokens(tmp_path: Path) -> None:
    async with _stack(tmp_path) as stack:
        key, _ = await stack.key(tokens_per_minute=100)
        streamed: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
        for _ in range(2):  # 60 tokens each, from the last event's usage: 0, then 60 used, both under 100
            answer = await stack.chat(key, **streamed)
            assert answer.status_code == 200 and "[DONE]" in answer.text
        refused = await stack.chat(key, **streamed)
        assert refused.status_code == 429 and _error(refused)["code"] == "tokens_per_minute"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        # Without usage in the answer, the request's max_tokens is charged: 98 of 100, so a request that
        # reserves 6 more (a 1-token prompt + max_tokens 5) is refused.
        other, _ = await stack.key(tokens_per_minute=100)
        assert (await stack.chat(other, max_tokens=98, messages=[{"role": "user", "content": "nousage"}])
                ).status_code == 200
        assert (await stack.chat(other, max_tokens=5)).status_code == 429
        fresh, _ = await stack.key(tokens_per_minute=100)
        assert (await stack.chat(fresh, max_tokens=40, messages=[{"role": "user", "content": "nousage"}])
                ).status_code == 200
        assert (await stack.chat(fresh)).status_code == 200  # 40 charged: under the limit
