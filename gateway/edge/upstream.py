"""A lean pooled HTTP/1.1 client for the proxies' upstream hop: raw bytes, httptools parsing,
keep-alive connections per upstream, bodies streamed both ways without buffering; `relay` copies an
upstream response to an ASGI client.

Why not httpx here: on the hot path its per-request bookkeeping cost more than the rest of the proxy
together (see docs/performance.md); the upstreams (vLLM, LiteLLM, OpenCode) speak plain HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import httptools

from gateway.edge.upstream_connection import UpstreamConnection
from gateway.edge.upstream_stream import UpstreamError as UpstreamError
from gateway.edge.upstream_stream import read_body

# Headers that describe one hop, never copied across the proxy (either way).
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"host", b"content-length",
})

# What a client of an event stream reads when the upstream breaks mid-body (OpenAI's error shape), just
# before the connection is aborted: a stream that simply ended would look like a complete reply.
BROKEN_STREAM_EVENT = (b'data: {"error": {"message": "The model\'s upstream copy broke mid-stream: this reply is '
                       b'incomplete; retry the request.", "type": "upstream_error", "code": 502}}\n\n')
EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")
BODILESS = frozenset({204, 304})  # statuses whose answers carry no body and may not say a length (RFC 9110)
# How often idle pooled connections are checked for a close by their upstream (uvicorn, under vLLM and
# LiteLLM, closes a keep-alive connection after 5 s idle): one the proxy kept would sit in CLOSE-WAIT.
SWEEP_EVERY_S = 1.0
SPLITS_KEPT = 1024  # URLs whose parts the pool keeps

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Answer(Protocol):
    """An upstream's answer as the proxies read it: UpstreamResponse, or a test's stand-in. The proxies name this,
    not the class: compiled (berth/compiled.py), a parameter of a class's type admits that class alone."""

    status: int
    headers: list[tuple[bytes, bytes]]
    ends: bool

    @property
    def unfinished(self) -> bool: ...

    def take_whole(self) -> bytes | None: ...

    async def hold_whole(self, most: int) -> None: ...

    def body(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...

    def release(self) -> None: ...


class Upstream(Protocol):
    """What the proxies send requests through: UpstreamPool, or a test's stand-in (as `Answer`, for the same reason)."""

    async def request(self, method: str, url: str, headers: list[tuple[bytes, bytes]],
                      body: bytes | AsyncIterator[bytes]) -> Answer: ...

    async def aclose(self) -> None: ...


@dataclass
class _Parsed:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    headers_done: bool = False
    body: list[bytes] = field(default_factory=list)
    complete: bool = False
    keep_alive: bool = False
    parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # Ask now: once the message completes, llhttp resets and always answers False.
        assert self.parser is not None
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if body:
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class UpstreamResponse:
    def __init__(self, pool: UpstreamPool, key: tuple[str, int], connection: UpstreamConnection,
                 parser: httptools.HttpResponseParser, parsed: _Parsed, head_only: bool) -> None:
        self.status = parser.get_status_code()
        self.headers = parsed.headers
        self._pool, self._key, self._connection = pool, key, connection
        self._parser, self._parsed = parser, parsed
        self._head_only = head_only
        self._released = False
        # The chunk `body` just gave is the body's last: the answer can end with it (one ASGI message less).
        self.ends = False

    @property
    def unfinished(self) -> bool:
        """More of the body is still to be read (the first read held only part of it, or the head alone)."""
        return not (self._parsed.complete or self._head_only)

    def take_whole(self) -> bytes | None:
        """The whole body when it is all in hand (complete, not a HEAD's), the connection released; else None."""
        parsed = self._parsed
        if not parsed.complete or self._head_only:
            return None
        body = b"".join(parsed.body)
        parsed.body = []
        self.release()
        return body

    async def hold_whole(self, most: int) -> None:
        """Read the rest of a short answer before any of it goes to the client, up to `most` bytes held: a break
        now (the copy killed between its head and its body) is an UpstreamError with `sent_nothing`, which a
        caller may still retry elsewhere, rather than an answer cut in front of its client. What is held is
        what `body` yields first; a longer answer is relayed from where holding stopped."""
        parsed = self._parsed
        held = sum(map(len, parsed.body))
        while not parsed.complete and held <= most:
            try:
                data = await self._connection.read()
            except OSError as error:
                self.close()
                raise UpstreamError(f"upstream read failed ({type(error).__name__})", sent_nothing=True) from None
            if not data:
                if not any(name in (b"content-length", b"transfer-encoding") for name, _ in parsed.headers):
                    return  # close-delimited: `body` reads the end again and ends there
                self.close()
                raise UpstreamError("upstream closed the connection mid-response", sent_nothing=True)
            held += len(data)
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserError as error:
                self.close()
                raise UpstreamError(f"malformed upstream response: {error}", sent_nothing=False) from None

    def body(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive, the connection released at its end, its break or its close
        (gateway/edge/upstream_stream.py: an async generator, which stays interpreted)."""
        return read_body(self)

    def close(self) -> None:
        """Discard the connection now, mid-body or not (its client went away): never back to the pool."""
        if not self._released:
            self._released = True
            self._parsed.parser = None
            self._connection.close()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        # The parser calls back into `_parsed`, which pointed back at it: a cycle left ten objects a request to the
        # cycle collector (docs/performance.md); done with parsing, the pair goes by reference counting.
        self._parsed.parser = None
        reusable = (self._parsed.complete or self._head_only) and self._parsed.keep_alive
        if reusable:
            self._pool._return(self._key, self._connection)
        else:
            self._connection.close()


class UpstreamPool:
    def __init__(self, connect_timeout_s: float = 5.0, max_idle_per_upstream: int = 256) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_idle = max_idle_per_upstream
        self._idle: dict[tuple[str, int], deque[UpstreamConnection]] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._splits: dict[str, tuple[tuple[str, int], str, str]] = {}

    def _return(self, key: tuple[str, int], connection: UpstreamConnection) -> None:
        idle = self._idle.setdefault(key, deque())
        if len(idle) < self.max_idle:
            idle.append(connection)
            if self._sweep is None:
                self._sweep = asyncio.get_running_loop().call_later(SWEEP_EVERY_S, self._reap)
        else:
            connection.close()

    def _reap(self) -> None:
        """Close the idle connections their upstream closed; check again while any stay idle. Without
        it the ones deep in a deque (taken last-in first-out) waited in CLOSE-WAIT for good."""
        self._sweep = None
        for key, idle in list(self._idle.items()):
            alive: deque[UpstreamConnection] = deque()
            for connection in idle:
                if connection.closed_by_upstream():
                    connection.close()
                else:
                    alive.append(connection)
            if alive:
                self._idle[key] = alive
            else:
                del self._idle[key]
        if self._idle:
            self._sweep = asyncio.get_running_loop().call_later(SWEEP_EVERY_S, self._reap)

    async def _connect(self, key: tuple[str, int]) -> UpstreamConnection:
        try:
            _transport, connection = await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(UpstreamConnection, *key), self.connect_timeout_s)
        except (OSError, TimeoutError) as error:
            raise UpstreamError(f"cannot connect to {key[0]}:{key[1]} ({type(error).__name__})", True,
                                refused=True) from None
        return connection

    async def request(self, method: str, url: str, headers: list[tuple[bytes, bytes]],
                      body: bytes | AsyncIterator[bytes]) -> UpstreamResponse:
        key, target, netloc = self._split(url)
        lines = [f"{method} {target} HTTP/1.1\r\nhost: {netloc}\r\n".encode("latin-1")]
        lines += [b"%b: %b\r\n" % header for header in headers]
        streamed = not isinstance(body, bytes)
        if streamed:
            lines.append(b"transfer-encoding: chunked\r\n\r\n")
        else:
            assert isinstance(body, bytes)
            if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
                lines.append(b"content-length: " + str(len(body)).encode() + b"\r\n")
            lines.append(b"\r\n")
        head = b"".join(lines)
        # A pooled connection may have been closed by the upstream while idle: with a replayable
        # body, retry once on a fresh connection when nothing came back.
        for attempt in (0, 1):
            # The retry takes a fresh connection: the other idle ones went stale at the same time.
            idle = self._idle.get(key) if attempt == 0 else None
            while idle and idle[-1].closed_by_upstream():  # closed since the last sweep: never worth a try
                idle.pop().close()
            reused = bool(idle)
            connection = idle.pop() if idle else await self._connect(key)
            try:
                return await self._exchange(key, connection, method, head, body, streamed)
            except UpstreamError as error:
                connection.close()
                if attempt == 0 and reused and error.sent_nothing and not streamed:
                    continue
                raise
            except BaseException:
                # Cancelled (the request's deadline, gateway/edge/exchange.py) or its body's source failed (over
                # the body limit): the upstream holds half a request, so the connection is never reused.
                connection.close()
                raise
        raise AssertionError("unreachable")

    def _split(self, url: str) -> tuple[tuple[str, int], str, str]:
        """(host, port), the request target and the Host of `url`; kept per URL (a proxy sends to a few copies'
        few routes), bounded: a URL with a client's query string is one of many."""
        split = self._splits.get(url)
        if split is None:
            parts = urlsplit(url)
            host = parts.hostname or "127.0.0.1"
            port = parts.port or (443 if parts.scheme == "https" else 80)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            split = ((host, port), target, parts.netloc)
            if len(self._splits) >= SPLITS_KEPT:
                self._splits.clear()
            self._splits[url] = split
        return split

    async def _exchange(self, key: tuple[str, int], connection: UpstreamConnection, method: str, head: bytes,
                        body: bytes | AsyncIterator[bytes], streamed: bool) -> UpstreamResponse:
        try:
            if streamed:
                connection.write(head)
                assert not isinstance(body, bytes)
                async for chunk in body:
                    if chunk:
                        connection.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                        await connection.drain()
                connection.write(b"0\r\n\r\n")
            else:
                assert isinstance(body, bytes)
                connection.write(head + body)
            await connection.drain()
        except (OSError, RuntimeError) as error:
            raise UpstreamError(f"upstream write failed ({type(error).__name__})", sent_nothing=True,
                                refused=True) from None
        parsed = _Parsed()
        parser = httptools.HttpResponseParser(parsed)
        parsed.parser = parser
        received = False
        while not parsed.headers_done:
            try:
                data = await connection.read()
            except OSError as error:
                raise UpstreamError(f"upstream read failed ({type(error).__name__})", not received) from None
            if not data:
                raise UpstreamError("upstream closed the connection before answering", sent_nothing=not received)
            received = True
            try:
                parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                raise UpstreamError("upstream asked for a protocol upgrade", sent_nothing=False) from None
            except httptools.HttpParserError as error:
                raise UpstreamError(f"malformed upstream response: {error}", sent_nothing=False) from None
        return UpstreamResponse(self, key, connection, parser, parsed, head_only=method == "HEAD")

    async def aclose(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            while idle:
                idle.pop().close()


async def relay(response: Answer, send: Send, log: logging.Logger, source: str, name: str,
                receive: Receive | None = None) -> None:
    """Copy an upstream response to the ASGI client: status and end-to-end headers, then each body chunk
    as it arrives. An upstream break mid-body is logged as "<source> <name> broke mid-response" and never
    looks like a complete reply: an event stream gets a last `data: {"error": …}` event, then the
    UpstreamError propagates, which is how an ASGI app aborts a started response (uvicorn closes the
    connection without the chunked terminator, so the client reads an incomplete body). The pooled
    connection is released whatever happens: a client that went away mid-stream must not leak it.

    With `receive` (the request body already read), a client that goes away from an event stream closes
    the upstream connection at once: uvicorn drops what is sent to a gone client without a word, so the copy would
    otherwise generate the whole reply for nobody and the connection return to the pool afterwards."""
    event_stream = any(key == b"content-type" and value.lower().startswith(b"text/event-stream")
                       for key, value in response.headers)
    headers = [(k, v) for k, v in response.headers if k not in HOP_BY_HOP]
    if not event_stream and response.status not in BODILESS and (whole := response.take_whole()) is not None:
        # All of it came with its head (a short answer, or one held whole): one body message, and its length
        # said, so the server frames no chunks (docs/performance.md, "A whole answer relayed whole").
        headers.append((b"content-length", b"%d" % len(whole)))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": whole})
        return
    last = b""
    # Event streams only: they are what runs long after the head; a whole reply is sent as it comes, and the
    # watcher (one task) stays off the non-streamed hot path measured in docs/performance.md.
    gone = asyncio.ensure_future(_client_gone(receive)) if receive is not None and event_stream else None

    def close_when_gone(task: asyncio.Future[None]) -> None:
        if not task.cancelled():
            response.close()  # the pending upstream read ends at once, as a break that relay keeps quiet

    if gone is not None:
        gone.add_done_callback(close_when_gone)
    ended = client_gone = False
    broke: UpstreamError | None = None
    try:
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        async for chunk in response.body():
            # The last chunk of a body whose end is known ends the answer: no empty message after it (each
            # message crosses every `send` wrapper and the server's send, docs/performance.md).
            ended = response.ends
            await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
            last = chunk
    except UpstreamError as error:  # answered after the handler: berth/compiled.py's rule for compiled modules
        broke, client_gone = error, gone is not None and gone.done()
    finally:
        if gone is not None:
            gone.cancel()
        response.release()
    if broke is not None:
        if client_gone:
            log.debug("client of %s %s went away mid-response; upstream connection closed", source, name)
            return
        log.warning("%s %s broke mid-response: %s", source, name, broke)
        if event_stream:
            # Blank lines first when the break cut an event short: the error must be an event of its own.
            separator = b"" if not last or last.endswith(EVENT_ENDS) else b"\n\n"
            await send({"type": "http.response.body", "body": separator + BROKEN_STREAM_EVENT, "more_body": True})
        raise broke
    if not ended:  # a body that ended with the stream, or with no chunk at all
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _client_gone(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
