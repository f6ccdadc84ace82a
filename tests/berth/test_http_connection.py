"""HttpConnection (berth/http_connection.py, berth/http_cycle.py), the HTTP/1.1 protocol every Berth server runs
under uvicorn's Server, spoken to over a real socket: a whole answer is one write and a stream's head leaves before
its body (issue 33); keep-alive, pipelining, chunked and HEAD framing, `Expect: 100-continue`, a body read in parts,
a client that leaves, an app that fails or frames a bad header, a malformed request, the idle keep-alive close,
and a trusted peer's x-forwarded-* headers (uvicorn's ProxyHeadersMiddleware, done by the protocol).
The connection limits are tests/security/test_connection_limits.py's."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from asyncio import selector_events
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from berth.http_connection import guarded_protocol
from berth.processes import free_port
from berth.settings.connections import ConnectionLimits

pytestmark = pytest.mark.timeout(30)
LEFT: list[dict[str, Any]] = []  # what the app's `receive` said once its client had gone


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope["path"]
    if path == "/echo":  # the body as the app reads it, in its parts
        parts = []
        while True:
            message = await receive()
            parts.append(message["body"])
            if not message["more_body"]:
                break
        body = b"%d:" % len(parts) + b"".join(parts)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await asyncio.sleep(0.3)  # the head must not wait for this
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/wait":  # until the client goes
        LEFT.append(await receive())
    elif path == "/two":  # two receivers wait; one is cancelled, the other still hears the client go
        first, second = asyncio.ensure_future(receive()), asyncio.ensure_future(receive())
        await asyncio.sleep(0.01)
        second.cancel()
        LEFT.append(await first)
    elif path == "/fail":
        raise RuntimeError("the app broke")
    elif path == "/who":  # as the app sees its caller
        client = scope["client"]
        body = b"%b %b:%d" % (scope["scheme"].encode(), client[0].encode(), client[1])
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})
    elif path == "/split":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1\r\nx-injected: 1")]})
    else:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"whole"})


@pytest.fixture
async def server() -> AsyncIterator[int]:
    async with _serving() as (port, _):
        yield port


@contextlib.asynccontextmanager
async def _serving(**config: Any) -> AsyncIterator[tuple[int, uvicorn.Server]]:
    port = free_port()
    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="critical",
                                           timeout_keep_alive=1, http=guarded_protocol(ConnectionLimits()), **config))
    task = asyncio.create_task(served.serve())
    async with asyncio.timeout(10):
        while not served.started:  # noqa: ASYNC110 — uvicorn offers a flag, not an event
            await asyncio.sleep(0.01)
    yield port, served
    served.should_exit = True
    await asyncio.wait_for(task, 10)


async def _read_until(reader: asyncio.StreamReader, end: bytes) -> bytes:
    data = b""
    while end not in data:
        chunk = await reader.read(65536)
        assert chunk, data
        data += chunk
    return data


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def test_a_whole_answer_is_one_write_and_a_streams_head_leaves_before_its_body(
        server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[bytes] = []  # what the server's socket transport was asked to write, an answer a write
    transport_class: Any = selector_events._SelectorSocketTransport  # type: ignore[attr-defined]  # the loop's own
    write = transport_class.write

    def recording(self: Any, data: bytes) -> None:
        if bytes(data).startswith(b"HTTP/1.1"):
            answers.append(bytes(data))
        write(self, data)

    monkeypatch.setattr(transport_class, "write", recording)
    reader, writer = await _connect(server)
    for _ in range(3):  # kept alive: each answer of the connection is whole
        writer.write(b"GET /whole HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await _read_until(reader, b"whole")).endswith(b"\r\n\r\nwhole")
    assert len(answers) == 3 and all(answer.endswith(b"\r\n\r\nwhole") for answer in answers), answers
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    async with asyncio.timeout(0.25):  # well before the body's 0.3 s
        head = await _read_until(reader, b"\r\n\r\n")
    assert b"text/event-stream" in head and b"transfer-encoding: chunked" in head and b"data: 1" not in head
    assert (await _read_until(reader, b"0\r\n\r\n")).endswith(b"9\r\ndata: 1\n\n\r\n0\r\n\r\n")
    writer.close()


async def test_pipelined_requests_are_answered_in_order_and_head_has_no_body(server: int) -> None:
    reader, writer = await _connect(server)
    writer.write(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nHEAD /b HTTP/1.1\r\nhost: x\r\n\r\n"
                 b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc")
    answers = await _read_until(reader, b"1:abc")
    assert answers.count(b"HTTP/1.1 200 OK") == 3 and answers.count(b"whole") == 1, answers
    assert answers.index(b"whole") < answers.index(b"1:abc")
    writer.close()


async def test_a_body_in_parts_and_expect_100_continue(server: int) -> None:
    reader, writer = await _connect(server)
    writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nexpect: 100-continue\r\n\r\n")
    assert await _read_until(reader, b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"3\r\nabc\r\n")
    await asyncio.sleep(0.05)  # a second read of the body, so the app's receive is given it in parts
    writer.write(b"2\r\nde\r\n0\r\n\r\n")
    answer = await _read_until(reader, b"abcde")
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"\r\n\r\n2:abcde"), answer
    writer.close()


@pytest.mark.parametrize("path", [b"/wait", b"/two"])
async def test_a_client_that_leaves_is_a_disconnect_for_the_app(server: int, path: bytes) -> None:
    LEFT.clear()
    _, writer = await _connect(server)
    writer.write(b"GET %b HTTP/1.1\r\nhost: x\r\n\r\n" % path)
    await writer.drain()
    await asyncio.sleep(0.05)  # the app is waiting in its receive
    writer.close()
    async with asyncio.timeout(5):
        while not LEFT:  # noqa: ASYNC110 — the app notes what it was told
            await asyncio.sleep(0.01)
    assert LEFT == [{"type": "http.disconnect"}]


async def test_failures_answer_500_or_close_and_a_bad_request_is_a_400(server: int) -> None:
    for path in (b"/fail", b"/split"):  # the app raised; the app framed a header that would split the answer
        reader, writer = await _connect(server)
        writer.write(b"GET %b HTTP/1.1\r\nhost: x\r\n\r\n" % path)
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 500 Internal Server Error") and b"x-injected" not in answer, answer
        writer.close()
    reader, writer = await _connect(server)
    writer.write(b"GET /a HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n")
    answer = await reader.read()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request") and answer.endswith(b"Invalid HTTP request received.")
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_uvicorns_timeout(server: int) -> None:
    for rest in (b"", b"later"):  # the second is answered before its body has all come
        reader, writer = await _connect(server)
        writer.write(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\nfirst" % (5 + len(rest)))
        await _read_until(reader, b"whole")
        writer.write(rest)
        async with asyncio.timeout(5):  # timeout_keep_alive=1
            assert await reader.read() == b""
        writer.close()


FORWARDED = b"GET /who HTTP/1.1\r\nhost: x\r\nx-forwarded-proto: https\r\nx-forwarded-for: 203.0.113.7:4711\r\n\r\n"


@pytest.mark.parametrize(("config", "seen"), [
    ({}, b"https 203.0.113.7:4711"),  # uvicorn's default: loopback is a trusted proxy
    ({"forwarded_allow_ips": "10.0.0.1"}, b"http 127.0.0.1:"),  # a peer not trusted: its headers change nothing
    ({"proxy_headers": False}, b"http 127.0.0.1:")])
async def test_a_trusted_peers_forwarded_headers_name_the_client_and_scheme(config: dict[str, Any],
                                                                              seen: bytes) -> None:
    async with _serving(**config) as (port, served):
        reader, writer = await _connect(port)
        for request in (FORWARDED, FORWARDED.replace(b"x-forwarded", b"x-other")):  # per request, not per connection
            writer.write(request)
            answer = await _read_until(reader, b"\r\n\r\n")
            answer += await reader.readexactly(int(answer.split(b"content-length: ")[1].split(b"\r\n")[0])
                                               - len(answer.partition(b"\r\n\r\n")[2]))
            body = answer.partition(b"\r\n\r\n")[2]
            assert body.startswith(seen if request is FORWARDED else b"http 127.0.0.1:"), answer
        # The protocol did the middleware's work: the app it calls is not wrapped in it.
        assert [type(connection.app) for connection in served.server_state.connections] == [type(app)]
        writer.close()


async def test_beyond_uvicorns_limit_concurrency_a_request_is_answered_503() -> None:
    async with _serving(limit_concurrency=2) as (port, _served):
        _reader, idle = await _connect(port)  # an open connection counts toward the limit, as in uvicorn
        reader, writer = await _connect(port)
        writer.write(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = await reader.read()  # `connection: close`
        assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"\r\n\r\nService Unavailable"), answer
        writer.close()
        idle.close()
