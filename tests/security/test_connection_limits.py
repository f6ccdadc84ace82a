"""Issue 29, finding 3: a stranger cannot exhaust a Berth HTTP server's memory or sockets.

The endpoint proxy under uvicorn on loopback with the protocol every Berth server runs (berth/http_guard.py),
limits from the settings (short clocks, so the test is quick): a flood of big headers is refused with a 431
before the head is buffered, slow heads get a 408 and slow bodies lose their connection within the limits,
connections beyond the per-address bound get a 503 — while another caller is served throughout and this
process's memory stays flat (before: 10 MB headers were answered 200 and slow connections held for good).
The shared stack's API and endpoint proxy answer a 32 KiB header with the 431: they run with the protocol."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn

from berth.http_connection import guarded_protocol
from berth.http_guard import OPEN
from berth.processes import free_port
from berth.security import SigningKey, TokenVerifier
from berth.settings.connections import ConnectionLimits
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.gateway.pool_copies import Copy, PoolRoutes
from tests.security.conftest import People

pytestmark = pytest.mark.timeout(90)
LIMITS = ConnectionLimits(max_header_bytes=16 * 1024, header_timeout_s=1.0, body_read_timeout_s=1.0,
                          max_connections=400, max_connections_per_client=100)
MIB = 1024 * 1024


@contextlib.asynccontextmanager
async def _guarded_proxy(tmp_path: Path, limits: ConnectionLimits = LIMITS) -> AsyncIterator[tuple[int, Copy]]:
    copy = await Copy("c1").start()
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(PoolRoutes([copy]), TokenVerifier.from_jwks(key.jwks()))  # type: ignore[arg-type]
    await proxy.refresh()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(proxy, host="127.0.0.1", port=port, http=guarded_protocol(limits),
                                           lifespan="off", log_level="critical", access_log=False))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:  # noqa: ASYNC110 — uvicorn offers a flag, not an event
                await asyncio.sleep(0.01)
        yield port, copy
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        copy.close()


async def _status_of(reader: asyncio.StreamReader) -> int | None:
    """The status of the answer on a connection, or None when it was closed without one."""
    try:
        line = await asyncio.wait_for(reader.readline(), 10)
    except (ConnectionError, asyncio.IncompleteReadError):
        return None
    return int(line.split(b" ")[1]) if line.startswith(b"HTTP/1.1 ") else None


async def _big_header(port: int, size: int) -> int | None:
    """Send a header of `size` bytes (as far as the server reads it) and say what came back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /endpoints/ep-1/v1/models HTTP/1.1\r\nhost: x\r\nx-big: ")
    with contextlib.suppress(ConnectionError):
        for _ in range(max(1, size // (64 * 1024))):
            writer.write(b"a" * min(size, 64 * 1024))
            await writer.drain()
            if reader.at_eof():
                break
    status = await _status_of(reader)
    writer.close()
    return status


async def _slow_head(port: int) -> tuple[int | None, float]:
    """A slowloris: one header byte every 0.2 s, never the blank line. (status, seconds until it ended)."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /endpoints/ep-1/v1/models HTTP/1.1\r\nhost: x\r\n")
    ending = asyncio.create_task(_status_of(reader))
    with contextlib.suppress(ConnectionError):
        while not ending.done() and time.monotonic() - started < 20:
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.2)
    status = await ending
    writer.close()
    return status, time.monotonic() - started


async def _slow_body(port: int) -> float:
    """A whole head, then one body byte every 0.5 s of a declared 1,000: seconds until the server hung up."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /endpoints/ep-1/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
                 b"\r\ncontent-length: 1000\r\n\r\n{")
    with contextlib.suppress(ConnectionError):
        while not reader.at_eof() and time.monotonic() - started < 20:
            writer.write(b" ")
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(1), 1.5)  # returns b"" once the server closes
    writer.close()
    return time.monotonic() - started


def _rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / MIB


async def test_big_headers_slow_heads_and_slow_bodies_are_cut_while_others_are_served(tmp_path: Path) -> None:
    async with _guarded_proxy(tmp_path) as (port, _copy), httpx.AsyncClient(timeout=10) as client:
        url = f"http://127.0.0.1:{port}/endpoints/ep-1/v1/chat/completions"
        assert (await client.post(url, json={"model": "m"})).status_code == 200
        before = _rss_mib()
        served: list[int] = []

        async def other_caller() -> None:
            while True:
                served.append((await client.post(url, json={"model": "m"})).status_code)
                await asyncio.sleep(0.1)

        caller = asyncio.create_task(other_caller())
        try:
            results: list[Any] = await asyncio.gather(
                *(_big_header(port, 10 * MIB) for _ in range(20)), *(_big_header(port, 32 * 1024) for _ in range(5)),
                *(_slow_head(port) for _ in range(15)), *(_slow_body(port) for _ in range(5)))
        finally:
            caller.cancel()
        flood, big, slow_heads, slow_bodies = results[:20], results[20:25], results[25:40], results[40:]
        # A 10 MB sender sees the 431, or (still writing when the refused socket closes after its 1 s linger)
        # only the reset; never a 200 — and its bytes were dropped, not held (the memory check below).
        assert set(flood) <= {431, None}, flood
        assert big == [431] * 5
        assert all(status in (408, None) and took < 5 for status, took in slow_heads), slow_heads
        assert 408 in [status for status, _ in slow_heads]
        assert all(took < 5 for took in slow_bodies), slow_bodies
        assert served and set(served) == {200}, served
        # 20 × 10 MB sent: what stayed is what the limits allow (before: ~190 MB per 20 held headers).
        assert _rss_mib() - before < 40, (before, _rss_mib())
        # The held ones were let go: a refused connection lingers 1 s (berth/http_connection.py LINGER_S), then
        # closes; what stays is the other caller's keep-alive connection.
        deadline = time.monotonic() + 10
        while OPEN.by_client.get("127.0.0.1", 0) > 2 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        assert OPEN.by_client.get("127.0.0.1", 0) <= 2, OPEN.by_client


async def test_connections_beyond_the_per_address_bound_are_refused_at_once(tmp_path: Path) -> None:
    limits = ConnectionLimits(header_timeout_s=5.0, max_connections_per_client=10)
    async with _guarded_proxy(tmp_path, limits) as (port, _copy):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        line = await asyncio.wait_for(reader.read(), 5)
        assert line.startswith(b"HTTP/1.1 503 ") and b"Too many connections" in line, line
        writer.close()
        for _, held_writer in held:
            held_writer.close()
        async with httpx.AsyncClient(timeout=10) as client:  # the bound frees as connections close
            async def answered() -> int:
                return (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code
            deadline = time.monotonic() + 5
            while (status := await answered()) != 200 and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            assert status == 200


def _head_of(url: str, header_bytes: int) -> bytes:
    """The first line a Berth server answers to GET /healthz with a header of `header_bytes`."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * header_bytes + b"\r\n\r\n")
        return sock.recv(4096).split(b"\r\n", 1)[0]


def test_the_api_and_the_endpoint_proxy_run_with_the_limits(people: People) -> None:
    """The stack's own processes (`berth server`, `berth proxy`), started as `berth up` starts them."""
    for name in ("api_url", "proxy_url"):
        url = people.stack.info[name]
        assert _head_of(url, 1024).startswith(b"HTTP/1.1 200 "), name
        assert _head_of(url, 32 * 1024) == b"HTTP/1.1 431 Request Header Fields Too Large", name
