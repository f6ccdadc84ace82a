"""The endpoint proxy, in process with its real upstream pool on loopback: a request to a Proxy=true
endpoint whose LiteLLM refuses the connection is held while LiteLLM is started again, and answered by it
once it is back; past the hold (or on a reset) it is a 503 with Retry-After in OpenAI error shape (the
documented "being restarted" answer), not 502; a direct replica that does not answer stays 502."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from berth.processes import free_port
from berth.security import Identity, SigningKey, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint import upstream_headers
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.gateway.endpoint.test_endpoint_proxy_identity import FakeApi


def _endpoint(service: str | None, url: str) -> dict[str, Any]:
    route: dict[str, Any] = {"id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [],
                             "service": service or "vllm", "service_url": url if service else None, "replicas": []}
    if not service:
        route["replicas"] = [url]
    return route


async def _ask(proxy: EndpointProxy, token: str | None = None) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b'{"model":"m","messages":[]}', "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await proxy.refresh()
    scope = {"type": "http", "path": "/endpoints/ep-1/v1/chat/completions", "method": "POST",
             "headers": [(b"content-type", b"application/json"),
                         *([(b"authorization", f"Bearer {token}".encode())] if token else [])],
             "query_string": b""}
    await proxy(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture()
def verifier(tmp_path: Path) -> TokenVerifier:
    return TokenVerifier.from_jwks(SigningKey.load_or_create(tmp_path).jwks())


def _proxy(endpoint: dict[str, Any], verifier: TokenVerifier, hold_s: float = 1.0) -> EndpointProxy:
    proxy = EndpointProxy(FakeApi([endpoint]), verifier, upstream=UpstreamPool(connect_timeout_s=2))  # type: ignore[arg-type]
    proxy.hold_timeout_s = hold_s
    return proxy


def _assert_unavailable(status: int, headers: dict[bytes, bytes], body: bytes) -> None:
    assert status == 503 and headers[b"retry-after"] == b"5"
    error = json.loads(body)["error"]
    assert error["type"] == "service_unavailable" and error["code"] == 503
    assert "LiteLLM proxy is not answering" in error["message"]


def test_litellm_refusing_connections_is_503_with_retry_after(verifier: TokenVerifier) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    _assert_unavailable(*asyncio.run(_ask(_proxy(_endpoint("litellm", closed), verifier))))


def test_a_request_held_while_litellm_restarts_is_answered_by_it(verifier: TokenVerifier) -> None:
    port = free_port()

    async def main() -> tuple[int, dict[bytes, bytes], bytes, float]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"
                         b'{"ok":true}')
            await writer.drain()
            writer.close()

        async def restart_later() -> asyncio.Server:
            await asyncio.sleep(0.6)  # LiteLLM is down this long, then listens on its port again
            return await asyncio.start_server(answer, "127.0.0.1", port)

        loop = asyncio.get_running_loop()
        started = loop.time()
        restarting = asyncio.create_task(restart_later())
        status, headers, body = await _ask(_proxy(_endpoint("litellm", f"http://127.0.0.1:{port}"), verifier,
                                                  hold_s=10.0))
        (await restarting).close()
        return status, headers, body, loop.time() - started

    status, _headers, body, took = asyncio.run(main())
    assert status == 200 and json.loads(body) == {"ok": True}
    assert 0.5 < took < 5.0  # held through the restart, answered soon after it


def test_litellm_resetting_before_a_response_is_503(verifier: TokenVerifier) -> None:
    async def main() -> tuple[int, dict[bytes, bytes], bytes]:
        async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)  # the request arrived; answer with an RST, not a response
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

        server = await asyncio.start_server(reset, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await _ask(_proxy(_endpoint("litellm", f"http://127.0.0.1:{port}"), verifier))
        finally:
            server.close()

    _assert_unavailable(*asyncio.run(main()))


def test_a_completion_litellm_died_with_is_sent_again_once_it_is_back(verifier: TokenVerifier) -> None:
    """LiteLLM took the request and was killed before answering (a reset): nothing reached the client,
    and a non-streamed completion can be replayed, so the client gets the restarted LiteLLM's answer."""
    async def main() -> tuple[int, bytes, int]:
        seen = 0

        async def die_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal seen
            await reader.readuntil(b"\r\n\r\n")
            seen += 1
            if seen == 1:  # the first one dies with the process: an RST, no response
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                           struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"
                         b'{"ok":true}')
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(die_once, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            status, _headers, body = await _ask(_proxy(_endpoint("litellm", f"http://127.0.0.1:{port}"), verifier,
                                                       hold_s=10.0))
        finally:
            server.close()
        return status, body, seen

    status, body, seen = asyncio.run(main())
    assert status == 200 and json.loads(body) == {"ok": True} and seen == 2


def test_unreachable_direct_replica_stays_502(verifier: TokenVerifier) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    status, _headers, body = asyncio.run(_ask(_proxy(_endpoint(None, closed), verifier)))
    assert status == 502 and json.loads(body)["error"]["type"] == "bad_gateway"


def test_a_completion_that_breaks_litellm_twice_is_not_sent_a_third_time(verifier: TokenVerifier) -> None:
    """A request LiteLLM dies with may be what kills it: it is replayed once, never in a loop that would
    take LiteLLM down for every user of the endpoint; the client gets the documented 503."""
    async def main() -> tuple[tuple[int, dict[bytes, bytes], bytes], int]:
        seen = 0

        async def always_die(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal seen
            await reader.readuntil(b"\r\n\r\n")
            seen += 1
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

        server = await asyncio.start_server(always_die, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            answer = await _ask(_proxy(_endpoint("litellm", f"http://127.0.0.1:{port}"), verifier, hold_s=10.0))
        finally:
            server.close()
        return answer, seen

    answer, seen = asyncio.run(main())
    _assert_unavailable(*answer)
    assert seen == 2


def test_a_request_held_past_its_assertions_life_reaches_litellm_with_a_fresh_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak's 401: a request held 42 s while LiteLLM was restarted carried its (reused) caller assertion,
    expired by then; LiteLLM refused it. Each later try is sent with an assertion signed at that moment."""
    monkeypatch.setattr(upstream_headers, "ASSERTION_TTL_S", 2.0)  # an assertion lives 2 s, the wait 3.5 s
    key = SigningKey.load_or_create(tmp_path)
    verifier = TokenVerifier.from_jwks(key.jwks())
    port = free_port()
    received: list[tuple[str, float]] = []

    async def main() -> int:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            caller = next(line.split(":", 1)[1].strip() for line in head.split("\r\n")
                          if line.lower().startswith("x-berth-caller:"))
            received.append((caller, time.time()))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"
                         b'{"ok":true}')
            await writer.drain()
            writer.close()

        async def restart_later() -> asyncio.Server:
            await asyncio.sleep(3.5)
            return await asyncio.start_server(answer, "127.0.0.1", port)

        restarting = asyncio.create_task(restart_later())
        endpoint = {**_endpoint("litellm", f"http://127.0.0.1:{port}"), "scope": "organization"}
        proxy = EndpointProxy(FakeApi([endpoint]), verifier, upstream=UpstreamPool(connect_timeout_s=2),  # type: ignore[arg-type]
                              signer=key)
        proxy.hold_timeout_s = 20.0
        token = key.endpoint_token(Identity(user="alice", org="acme"), "ep-1", 600)
        status, _headers, _body = await _ask(proxy, token)
        (await restarting).close()
        return status

    assert asyncio.run(main()) == 200
    (assertion, at), = received
    claims = verifier.verify(assertion, "ep-1")  # raises if it had expired on the way
    assert claims["sub"] == "alice" and claims["exp"] > at

