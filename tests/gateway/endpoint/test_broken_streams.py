"""Issue 12, item 6: a stream whose upstream breaks never looks complete. Through the real endpoint proxy
under uvicorn on loopback, a client of an upstream that dies mid-stream (a raw server that closes or
resets the connection, the engine simulator killed) reads a last `data: {"error": …}` event and then an
aborted body (httpx: RemoteProtocolError), never a clean end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import uvicorn

from berth.contracts import RoutesTable
from berth.processes import free_port
from berth.security import SigningKey, TokenVerifier
from gateway.endpoint.endpoint_proxy import EndpointProxy
from simulator.testing import start_simulator

EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "tok"}}]}\n\n'
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


async def _half_a_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers with two events, then breaks as the request's model says: `close` (between events), `cut`
    (in the middle of an event), `reset` (RST, as a killed host's kernel does)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    body = await reader.readexactly(length)
    writer.write(HEAD + _chunk(EVENT) + _chunk(EVENT))
    if b'"cut"' in body:
        writer.write(_chunk(b'data: {"choices": [{"ind'))
    await writer.drain()
    if b'"reset"' in body:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


@contextlib.asynccontextmanager
async def _serve_proxy(upstream_url: str, key: SigningKey) -> AsyncIterator[str]:
    class Routes:
        async def routes(self) -> RoutesTable:
            return RoutesTable.model_validate({"endpoints": [{
                "id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [],
                "service": "vllm", "service_url": None, "replicas": [upstream_url]}]})

        async def aclose(self) -> None:
            pass

    proxy = EndpointProxy(Routes(), TokenVerifier.from_jwks(key.jwks()), signer=key)  # type: ignore[arg-type]
    await proxy.refresh()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(proxy, host="127.0.0.1", port=port, http="httptools", lifespan="off",
                                           log_level="critical", access_log=False))
    serving = asyncio.create_task(server.serve())
    try:
        await asyncio.wait_for(_started(server), 10)
        yield f"http://127.0.0.1:{port}/endpoints/ep-1"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        await proxy.upstream.aclose()


async def _started(server: uvicorn.Server) -> None:
    while not server.started:  # noqa: ASYNC110 — uvicorn offers a flag, not an event
        await asyncio.sleep(0.01)


async def _stream(url: str, body: dict[str, Any], after_three: Callable[[], Awaitable[None]] | None = None
                  ) -> tuple[list[str], BaseException | None]:
    """The data lines a client read, and how its read of the body ended (None: a clean end);
    `after_three` runs once three events came."""
    lines: list[str] = []
    async with httpx.AsyncClient(timeout=30) as client, client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        try:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    lines.append(line)
                    if len(lines) == 3 and after_three is not None:
                        await after_three()
        except httpx.HTTPError as error:
            return lines, error
    return lines, None


def _upstream_error(line: str) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(line.removeprefix("data:"))["error"]
    return error


@pytest.fixture
def key(tmp_path: Any) -> SigningKey:
    return SigningKey.load_or_create(tmp_path)


@pytest.mark.parametrize("how", ["close", "cut", "reset"])
async def test_a_stream_broken_by_its_upstream_ends_with_an_error_and_an_abort(how: str, key: SigningKey) -> None:
    upstream = await asyncio.start_server(_half_a_stream, "127.0.0.1", 0)
    upstream_url = f"http://127.0.0.1:{upstream.sockets[0].getsockname()[1]}"
    try:
        async with _serve_proxy(upstream_url, key) as url:
            lines, ended = await _stream(f"{url}/v1/chat/completions", {"model": how, "stream": True})
            assert isinstance(ended, httpx.RemoteProtocolError), ended
            assert lines[:2] == [EVENT.decode().strip()] * 2
            error = _upstream_error(lines[-1])
            assert (error["type"], error["code"]) == ("upstream_error", 502)
            assert "broke mid-stream" in error["message"]
            assert "[DONE]" not in "".join(lines)
    finally:
        upstream.close()


async def test_a_killed_engine_mid_stream_never_looks_like_a_finished_reply(key: SigningKey) -> None:
    engine = await start_simulator("sim/model", env={"BERTH_SIM_TOKENS_PER_SECOND": "40"})
    try:
        async with _serve_proxy(engine.base_url, key) as url:
            whole, ended = await _stream(f"{url}/v1/chat/completions", {
                "model": "sim/model", "stream": True, "max_tokens": 4,
                "messages": [{"role": "user", "content": "hi"}]})
            assert ended is None and whole[-1] == "data: [DONE]"  # an unbroken stream still ends cleanly

            async def kill_engine() -> None:
                engine.process.send_signal(signal.SIGKILL)
                await engine.process.wait()

            lines, ended = await _stream(f"{url}/v1/chat/completions", {
                "model": "sim/model", "stream": True, "max_tokens": 400,
                "messages": [{"role": "user", "content": "hi"}]}, after_three=kill_engine)
    finally:
        await engine.stop(signal.SIGKILL)
    assert isinstance(ended, httpx.RemoteProtocolError), ended
    assert "[DONE]" not in "".join(lines)
    assert _upstream_error(lines[-1])["code"] == 502
