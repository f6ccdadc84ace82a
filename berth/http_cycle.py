"""RequestCycle: one HTTP/1.1 request's ASGI `receive` and `send` on its connection (berth/http_connection.py),
and Flow, the connection's read and write back-pressure.

The answer is framed as uvicorn frames it (content-length, else chunked; `connection: close` where the
connection ends; a header name or value that could split the answer is refused), with one difference that
matters on loopback: a whole answer leaves in one system call. The head is held until the body's first bytes
when the answer declares its length; any other head (an event stream's) leaves at the end of the loop step
it was sent in (docs/performance.md, "One write a whole answer").

Compiled by mypyc (scripts/compile_hot_path.py): no `await` inside an `except` or `finally` block
(berth/compiled.py says why)."""

from __future__ import annotations

import asyncio
import http
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

HIGH_WATER = 65536  # request body bytes held for the app before the connection stops reading
HEADER_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
HEADER_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
LOG = logging.getLogger("uvicorn.error")  # uvicorn's logger: the server's own lines stay where they were
ACCESS = logging.getLogger("uvicorn.access")
UNKNOWN, FIXED, CHUNKED = 0, 1, 2  # how an answer's body is framed
INTERNAL_ERROR = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"21"),
                  (b"connection", b"close")]

App = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[Any]]


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %b\r\n" % (status, phrase)


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


def _nothing() -> None:
    return None


def _log_access(scope: dict[str, Any], status: int) -> None:
    """uvicorn's access line, where its access logger has a handler."""
    query: bytes = scope["query_string"]
    path = scope["path"] + ("?" + query.decode("ascii") if query else "")
    client = scope.get("client")
    ACCESS.info('%s - "%s %s HTTP/%s" %d', f"{client[0]}:{client[1]}" if client else "-", scope["method"], path,
                scope["http_version"], status)


class Flow:
    """A connection's back-pressure: reading paused while the app holds HIGH_WATER of body (or a pipelined
    request waits), writing awaited while the transport's buffer is over its high-water mark."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport, self.loop = transport, loop
        self.read_paused = False
        self.write_paused = False
        self._drained: list[asyncio.Future[None]] = []

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        drained, self._drained = self._drained, []
        for waiter in drained:
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        waiter: asyncio.Future[None] = self.loop.create_future()
        self._drained.append(waiter)
        await waiter


class RequestCycle:
    """One request: its scope, the body as it arrives, and the answer's framing."""

    def __init__(self, scope: dict[str, Any], transport: asyncio.Transport, flow: Flow,
                 default_headers: list[tuple[bytes, bytes]], keep_alive: bool, expect_100: bool,
                 on_response: Callable[[], None], access_log: bool = False) -> None:
        self.scope, self.transport, self.flow, self.loop = scope, transport, flow, flow.loop
        self.default_headers = default_headers
        self.keep_alive, self.waiting_for_100 = keep_alive, expect_100
        self.on_response, self.access_log = on_response, access_log
        self.is_head = scope["method"] == "HEAD"
        self.disconnected = False
        self.more_body = True  # the request's body is still arriving
        self.body_size = 0
        self.response_started = False
        self.response_complete = False
        self._chunks: list[bytes] = []
        self._body_ended = False  # the app was given the body's last message
        self._waiters: list[asyncio.Future[None]] = []  # receivers waiting (a body reader, a disconnect watcher)
        self._framing = UNKNOWN
        self._left = 0  # content-length bytes still to send
        self._held: bytes | None = None  # the head, until the body's first bytes (or the loop step's end)

    # --- what the connection tells it -----------------------------------------------------------------
    def add_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self.body_size += len(body)
        self.wake()

    def body_ended(self) -> None:
        self.more_body = False
        self.wake()

    def wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    # --- the app ------------------------------------------------------------------------------------
    async def run_asgi(self, app: App) -> None:
        failed: BaseException | None = None
        result: object = None
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as error:  # noqa: BLE001 — whatever the app raised is logged and answered, as uvicorn does
            failed = error
        self.on_response = _nothing
        if failed is not None:
            LOG.error("Exception in ASGI application\n", exc_info=failed)
            if not self.response_started:
                await self._send_500()
            else:
                self.transport.close()
        elif result is not None:
            LOG.error("ASGI callable should return None, but returned '%s'.", result)
            self.transport.close()
        elif not self.response_started and not self.disconnected:
            LOG.error("ASGI callable returned without starting response.")
            await self._send_500()
        elif not self.response_complete and not self.disconnected:
            LOG.error("ASGI callable returned without completing response.")
            self.transport.close()

    async def _send_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500, "headers": INTERNAL_ERROR})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error", "more_body": False})

    async def receive(self) -> dict[str, Any]:
        if self.waiting_for_100 and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100 = False
        while True:
            if self.disconnected or self.response_complete:
                return {"type": "http.disconnect"}
            if self._chunks or (not self.more_body and not self._body_ended):
                break
            self.flow.resume_reading()
            waiter: asyncio.Future[None] = self.loop.create_future()
            self._waiters.append(waiter)  # each its own: one receiver cancelled leaves another waiting
            await waiter
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self.body_size = 0
        self._body_ended = not self.more_body
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: dict[str, Any]) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self._start(message)
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            body = message.get("body", b"")
            self._body(body if type(body) is bytes else bytes(body), bool(message.get("more_body", False)))
        else:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")

    # --- the answer ---------------------------------------------------------------------------------
    def _start(self, message: dict[str, Any]) -> None:
        """The head, held (sent with the body's first bytes or at the loop step's end). A header that could
        split the answer raises before anything is started: the app's failure is then answered 500."""
        self._framing, self._left = UNKNOWN, 0
        status: int = message["status"]
        line = STATUS_LINES.get(status)
        parts = [line if line is not None else _status_line(status)]
        # The server's own (date, server) go first as they are; the app's are checked, in tuples or lists.
        parts += [b"%b: %b\r\n" % (name, value) for name, value in self.default_headers]
        closing = False
        headers: Any = message.get("headers", ())  # any iterable of pairs, as ASGI allows
        for name, value in headers:
            if HEADER_NAME.search(name) is not None:
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE.search(value) is not None:
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name == b"content-length" and self._framing == UNKNOWN:
                self._left = int(value.decode())
                self._framing = FIXED
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self._left = 0
                self._framing = CHUNKED
            elif name == b"connection" and b"close" in [token.strip().lower() for token in value.split(b",")]:
                self.keep_alive = False
                closing = True
            parts += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not closing:
            parts.append(b"connection: close\r\n")
        if self._framing == UNKNOWN and not self.is_head and status not in (204, 304):
            self._framing = CHUNKED
            parts.append(b"transfer-encoding: chunked\r\n")
        parts.append(b"\r\n")
        self.response_started = True
        self.waiting_for_100 = False
        self._held = b"".join(parts)
        if self._framing != FIXED:
            self.loop.call_soon(self._flush)  # a stream's head leaves now, not with its first event
        if self.access_log:
            _log_access(self.scope, status)

    def _body(self, body: bytes, more_body: bool) -> None:
        if self.is_head:
            self._left = 0
            data = b""
        elif self._framing == CHUNKED:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += b"0\r\n\r\n"
        else:
            if len(body) > self._left:
                raise RuntimeError("Response content longer than Content-Length")
            self._left -= len(body)
            data = body
        held = self._held
        if held is not None:
            self._held = None
            data = held + data
        if data:
            self.transport.write(data)
        if not more_body:
            if self._left != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.wake()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self.transport.is_closing():
                self.transport.write(held)
