"""GuardedHttpTools: uvicorn's httptools protocol with ConnectionLimits enforced on every connection (issue 29).

uvicorn bounds neither a request head's size (httptools buffers a 10 MB header whole) nor how long a head or a
body may take, and counts no connections per client: a stranger could hold memory and sockets without end.
Each Berth HTTP server (`berth server`, `berth proxy`, the model gateway) runs with `http=` this protocol:
- the head (request line and headers) beyond `max_header_bytes` is a 431, found before httptools buffers it;
- a head not complete `header_timeout_s` after its first byte (or the connection's start) is a 408;
- a body that sends nothing for `body_read_timeout_s` has its connection closed (the app sees a disconnect);
- beyond `max_connections` open connections, or `max_connections_per_client` from one address, a new
  connection is answered 503 and closed at once.
Every refusal is one plain-text line with `connection: close`. Each request's answer is written through HeadHeld
(berth/head_held.py): a whole answer leaves in one system call."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from berth.head_held import HeadHeld
from berth.settings.connections import ConnectionLimits

LINGER_S = 1.0  # how long a refused connection's further bytes are read and dropped before it closes
REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class OpenConnections:
    """This process's open connections, per client address (one server per process)."""

    def __init__(self) -> None:
        self.by_client: Counter[str] = Counter()
        self.total = 0

    def admit(self, client: str, limits: ConnectionLimits) -> bool:
        if self.total >= limits.max_connections or self.by_client[client] >= limits.max_connections_per_client:
            return False
        self.by_client[client] += 1
        self.total += 1
        return True

    def release(self, client: str) -> None:
        self.total -= 1
        self.by_client[client] -= 1
        if self.by_client[client] <= 0:
            del self.by_client[client]  # the counter's keys stay bounded by the open connections


class GuardedHttpTools(HttpToolsProtocol):
    LIMITS: ClassVar[ConnectionLimits] = ConnectionLimits()
    OPEN: ClassVar[OpenConnections] = OpenConnections()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else ""
        self._head_bytes, self._in_head, self._discarding, self._body_read = 0, True, False, False
        self._timer: asyncio.TimerHandle | None = None
        self._counted = self.OPEN.admit(self._peer, self.LIMITS)
        if not self._counted:
            self._refuse(503, f"Too many connections (at most {self.LIMITS.max_connections_per_client} per "
                              "client address); retry later.")
            return
        self._arm(self.LIMITS.header_timeout_s, self._head_too_slow)  # a connection that sends nothing too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if getattr(self, "_counted", False):
            self._counted = False
            self.OPEN.release(self._peer)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return  # refused: read, never buffered
        if self._in_head:
            limit = self.LIMITS.max_header_bytes
            if self._head_bytes + len(data) > limit:
                end = data.find(b"\r\n\r\n")  # the head may end inside this read, a body after it
                if end < 0 or self._head_bytes + end + 4 > limit:
                    self._refuse(431, f"The request's headers exceed {limit} bytes.")
                    return
            self._head_bytes += len(data)
        self._body_read = False
        super().data_received(data)
        # The clocks run only for what this read left incomplete: a request that arrives whole in one read
        # (nearly every one) arms and cancels nothing, where a timer a parser event cost ~5 µs a request.
        if self._discarding or self.transport.is_closing():
            return
        if self._in_head:
            if self._head_bytes and self._timer is None:
                self._arm(self.LIMITS.header_timeout_s, self._head_too_slow)  # from the head's first byte on
        elif self._body_read or self._timer is None:
            self._arm(self.LIMITS.body_read_timeout_s, self._body_too_slow)  # from the last body bytes read

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel()  # the head's clock; the body's starts when this read is parsed (data_received)
        super().on_headers_complete()
        if self.cycle is not None and not self._discarding:
            self.cycle.transport = HeadHeld(self.transport, self.loop)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        self._body_read = True
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._cancel()  # the response may take minutes (a long generation): no clock on it
        self._in_head, self._head_bytes = True, 0
        super().on_message_complete()

    # --- clocks and refusals --------------------------------------------------------------------------
    def _arm(self, delay_s: float, callback: Callable[[], None]) -> None:
        self._cancel()
        self._timer = self.loop.call_later(delay_s, callback)

    def _cancel(self) -> None:
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
            self._timer = None

    def _head_too_slow(self) -> None:
        self._timer = None
        self._refuse(408, f"The request's headers did not arrive within {self.LIMITS.header_timeout_s:g} s.")

    def _body_too_slow(self) -> None:
        self._timer = None
        if self.flow is not None and self.flow.read_paused:
            self._arm(self.LIMITS.body_read_timeout_s, self._body_too_slow)  # the app is behind, not the client
            return
        if not self.transport.is_closing():
            self.transport.close()  # mid-body: no answer can be framed; the app's receive sees a disconnect

    def _refuse(self, status: int, line: str) -> None:
        self._cancel()
        if self.transport.is_closing() or self._discarding:
            return
        body = line.encode() + b"\n"
        self.transport.write(b"HTTP/1.1 %d %b\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%b" % (status, REASONS[status], len(body), body))
        # A lingering close, as nginx's: closing with unread bytes would send a reset that makes the client's
        # kernel drop the answer; what still comes is read and dropped for LINGER_S, then the socket closes.
        self._discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedHttpTools]:
    """The protocol class to give uvicorn (`http=`), bound to `limits`."""
    return type("GuardedHttpTools", (GuardedHttpTools,), {"LIMITS": limits})
