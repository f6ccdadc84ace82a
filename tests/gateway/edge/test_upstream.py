"""The proxies' upstream client against a raw loopback HTTP server: framing, streaming, pooling."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import uvloop

from gateway.edge.upstream import UpstreamError, UpstreamPool, relay

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    body = b""
    lower = head.lower()
    if b"content-length:" in lower:
        length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
    elif b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readline()).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
    return head, body


async def _collect(pool: UpstreamPool, method: str, url: str,
                   body: bytes | AsyncIterator[bytes] = b"") -> tuple[int, bytes]:
    response = await pool.request(method, url, [(b"x-test", b"1")], body)
    data = b"".join([chunk async for chunk in response.body()])
    return response.status, data


async def test_content_length_chunked_and_keepalive_reuse() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                head, body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            assert b"x-test: 1" in head
            if b"/chunked" in head:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                             b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
            await writer.drain()

    server, url = await _serve(handler)
    pool = UpstreamPool()
    try:
        assert await _collect(pool, "POST", url + "/echo", b'{"a":1}') == (201, b'{"a":1}')
        assert await _collect(pool, "GET", url + "/chunked") == (200, b"hello world")

        async def upload() -> AsyncIterator[bytes]:
            for part in (b"part1-", b"part2"):
                yield part

        assert await _collect(pool, "POST", url + "/echo", upload()) == (201, b"part1-part2")
        assert connections == 1  # one keep-alive connection served all three
    finally:
        await pool.aclose()
        server.close()


async def test_close_delimited_body_and_stale_connection_retry() -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # closes the idle connection behind the pool's back
        await writer.wait_closed()
        closed.set()

    server, url = await _serve(handler)
    pool = UpstreamPool()
    try:
        assert await _collect(pool, "POST", url, b"x") == (200, b"ok")
        await asyncio.wait_for(closed.wait(), 10)
        assert await _collect(pool, "POST", url, b"y") == (200, b"ok")  # retried on a fresh connection
    finally:
        await pool.aclose()
        server.close()


async def test_connect_failure_and_mid_body_break() -> None:
    pool = UpstreamPool(connect_timeout_s=1)
    with pytest.raises(UpstreamError) as error:
        await pool.request("GET", "http://127.0.0.1:9/", [], b"")
    assert error.value.sent_nothing

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    try:
        response = await pool.request("GET", url, [], b"")
        assert response.status == 200
        with pytest.raises(UpstreamError) as broken:
            async for _ in response.body():
                pass
        assert not broken.value.sent_nothing
    finally:
        await pool.aclose()
        server.close()


async def test_close_delimited_response() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    server, url = await _serve(handler)
    pool = UpstreamPool()
    try:
        assert await _collect(pool, "GET", url) == (200, b"all of it")
    finally:
        await pool.aclose()
        server.close()


async def test_relay_copies_status_headers_and_body_and_aborts_a_broken_one(caplog: pytest.LogCaptureFixture) -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, _ = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            if b"/slow" in head:  # the rest never comes: only the proxy can end this connection
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n")
                await writer.drain()
                await reader.read()
                closed.set()
                return
            if b"/broken" in head:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
                await writer.drain()
                writer.close()
                return
            writer.write(b"HTTP/1.1 201 Created\r\nx-kept: 1\r\nconnection: keep-alive\r\n"
                         b"transfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
            await writer.drain()

    server, url = await _serve(handler)
    pool = UpstreamPool()
    log = logging.getLogger("test.relay")
    try:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await relay(await pool.request("GET", url + "/ok", [], b""), send, log, "upstream", "u1")
        # A body that came whole with its head is one message, its length said (the server frames no chunks).
        assert sent == [
            {"type": "http.response.start", "status": 201, "headers": [(b"x-kept", b"1"), (b"content-length", b"2")]},
            {"type": "http.response.body", "body": b"ok"},
        ]
        assert sum(len(idle) for idle in pool._idle.values()) == 1  # the connection went back to the pool

        sent.clear()
        with caplog.at_level(logging.WARNING, logger="test.relay"), pytest.raises(UpstreamError):
            await relay(await pool.request("GET", url + "/broken", [], b""), send, log, "replica", "r1")
        # No closing empty chunk: the exception is what makes the ASGI server abort the connection, so a
        # short body never passes for a whole one (an event stream's error event: test_broken_streams.py).
        assert [m.get("body") for m in sent] == [None, b"partial"]
        assert "replica r1 broke mid-response" in caplog.text

        async def gone(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                raise OSError("client went away")

        slow = await pool.request("GET", url + "/slow", [], b"")
        with pytest.raises(OSError):
            await relay(slow, gone, log, "upstream", "u1")
        # A client gone mid-body: the connection is closed at once, not pooled with a response half read.
        assert slow._connection.closed_by_upstream()  # closed: its transport is going
        await asyncio.wait_for(closed.wait(), 5)
        assert not any(pool._idle.values())
    finally:
        await pool.aclose()
        server.close()


async def test_a_big_answer_read_slowly_pauses_the_upstream_and_a_big_upload_waits_for_a_slow_one() -> None:
    await _big_both_ways()


def test_the_upstream_client_on_uvloop() -> None:
    """The proxies serve on uvloop (gateway/endpoint/run.py), whose transports are not asyncio's classes."""
    uvloop.run(_big_both_ways())


async def _big_both_ways() -> None:
    """The connection holds at most READ_HELD bytes unread (then stops reading until the relay catches up) and a
    streamed request body waits while the upstream reads slowly: every byte arrives, in order, both ways."""
    answer = bytes(range(256)) * 16384  # 4 MiB
    upload = b"u" * (8 << 20)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, body = await _read_request(reader)
        if b"/upload" in head:
            reply = str(len(body)).encode() + (b" intact" if body == upload else b" damaged")
        else:
            reply = answer
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(reply), reply))
        await writer.drain()
        writer.close()

    async def slowly() -> AsyncIterator[bytes]:
        for start in range(0, len(upload), 1 << 20):
            yield upload[start:start + (1 << 20)]

    server, url = await _serve(handler)
    pool = UpstreamPool()
    try:
        response = await pool.request("GET", url + "/big", [], b"")
        received, paused = [], False
        async for chunk in response.body():
            received.append(chunk)
            await asyncio.sleep(0.001)  # a slow client: the copy is faster than the relay
            # Read between the relay's reads (uvloop's transport methods cannot be wrapped, nor, compiled, the
            # connection's): what arrived meanwhile past READ_HELD paused the upstream.
            paused = paused or response._connection._paused_reading
        assert b"".join(received) == answer and paused
        status, body = await _collect(pool, "POST", url + "/upload", slowly())
        assert (status, body) == (200, f"{len(upload)} intact".encode())
    finally:
        await pool.aclose()
        server.close()
