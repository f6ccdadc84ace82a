"""HttpConnection: the HTTP/1.1 protocol every Berth server runs under uvicorn's Server (`http=`), with
ConnectionLimits enforced on every connection (issue 29) — a compiled stand-in for uvicorn's httptools
protocol, which ran interpreted on every request of the endpoint proxy (issue 33: ~16 % of its CPU).

uvicorn's Server still listens, starts and stops; this is what each connection runs: httptools parses, each
request becomes a RequestCycle (berth/http_cycle.py) given to the app, pipelined requests wait their turn,
and an idle keep-alive connection is closed after uvicorn's `timeout_keep_alive`. The guards:
- the head (request line and headers) beyond `max_header_bytes` is a 431, found before httptools buffers it;
- a head not complete `header_timeout_s` after its first byte (or the connection's start) is a 408;
- a body that sends nothing for `body_read_timeout_s` has its connection closed (the app sees a disconnect);
- beyond `max_connections` open connections, or `max_connections_per_client` from one address, a new
  connection is answered 503 and closed at once.
Every refusal is one plain-text line with `connection: close`. One timer per connection keeps every clock: it
fires at the soonest deadline it was set for and, where the deadline moved on meanwhile, sets itself again, so
a request that arrives whole and is answered arms and cancels nothing.

uvicorn's ProxyHeadersMiddleware (wrapped around the app when `proxy_headers` is on, as it is by default) is done
here instead, with the same rules: whether the peer is one of `forwarded_allow_ips` is decided once a connection,
and only a trusted peer's request that carries `x-forwarded-proto` or `x-forwarded-for` has its scope's scheme
and client rewritten. The middleware ran interpreted on every request; a WebSocket, handed over to uvicorn's
protocol, still runs it.

Compiled by mypyc (scripts/compile_hot_path.py): no `await` inside an `except` or `finally` block."""

from __future__ import annotations

import asyncio
import functools
import urllib.parse
from typing import Any, cast

import httptools
from uvicorn.config import Config
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.utils import get_local_addr, get_remote_addr, is_ssl
from uvicorn.server import ServerState

from berth.http_cycle import ACCESS, HIGH_WATER, LOG, STATUS_LINES, App, Flow, RequestCycle
from berth.http_guard import OPEN, refusal
from berth.settings.connections import ConnectionLimits

NO_CLOCK, HEAD_CLOCK, BODY_CLOCK, IDLE_CLOCK = 0, 1, 2, 3
LINGER_S = 1.0  # how long a refused connection's further bytes are read and dropped before it closes


class HttpConnection:
    """One client connection: parsing, its requests in turn, its clocks and its refusals."""

    transport: asyncio.Transport
    flow: Flow

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, limits: ConnectionLimits | None = None) -> None:
        if not config.loaded:
            config.load()
        self.config, self.server_state, self.app_state = config, server_state, app_state
        app: Any = config.loaded_app
        self.trusted_hosts: Any = None  # uvicorn's _TrustedHosts, where proxy headers apply
        if isinstance(app, ProxyHeadersMiddleware):  # uvicorn wraps the app last: it is the outermost layer
            self.trusted_hosts, app = app.trusted_hosts, app.app
        self.app = cast(App, app)
        self.trusted = False  # whether this peer's x-forwarded-* headers are believed
        self.loop = _loop or asyncio.get_running_loop()
        self.limits = limits or ConnectionLimits()
        self.root_path: str = config.root_path
        self.raw_root_path = self.root_path.encode("ascii")
        self.asgi = {"version": config.asgi_version, "spec_version": "2.3"}
        self.keep_alive_s = float(config.timeout_keep_alive)
        self.limit_concurrency: int | None = config.limit_concurrency
        self.access_log = ACCESS.hasHandlers()  # as uvicorn decides it, once a connection
        self.parser: Any = httptools.HttpRequestParser(self)
        try:  # answer the first of pipelined requests sent after a `connection: close` one, as uvicorn does
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        except AttributeError:
            pass
        self.server: Any = None
        self.client: Any = None
        self.scheme = "http"
        self.peer = ""
        self.cycle: RequestCycle | None = None
        self.pipeline: list[tuple[RequestCycle, App]] = []
        self._counted = False
        self._in_head, self._head_bytes, self._body_read, self._discarding = True, 0, False, False
        self._clock, self._deadline, self._timer_at = NO_CLOCK, 0.0, 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect_100 = False
        self._forwarded = False

    # --- asyncio.Protocol ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.flow = Flow(transport, self.loop)
        self.server_state.connections.add(self)  # type: ignore[arg-type]
        self.server, self.client = get_local_addr(transport), get_remote_addr(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        self.peer = self.client[0] if self.client else ""
        if self.trusted_hosts is not None:
            self.trusted = (self.client[0] if self.client else None) in self.trusted_hosts
        self._counted = OPEN.admit(self.peer, self.limits)
        if not self._counted:
            self._refuse(503, f"Too many connections (at most {self.limits.max_connections_per_client} per "
                              "client address); retry later.")
            return
        self._set_clock(HEAD_CLOCK, self.limits.header_timeout_s)  # a connection that sends nothing too

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_state.connections.discard(self)  # type: ignore[arg-type]
        self._stop_clock()
        self._release()
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.wake()
        self.flow.resume_writing()
        if exc is None:
            self.transport.close()

    def eof_received(self) -> None:
        return None  # the transport closes, as under uvicorn

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return  # refused: read, never buffered
        if self._in_head:
            limit = self.limits.max_header_bytes
            if self._head_bytes + len(data) > limit:
                end = data.find(b"\r\n\r\n")  # the head may end inside this read, a body after it
                if end < 0 or self._head_bytes + end + 4 > limit:
                    self._refuse(431, f"The request's headers exceed {limit} bytes.")
                    return
            self._head_bytes += len(data)
        self._body_read = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgrade()
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        if self._discarding or self.transport.is_closing():
            return
        # The clocks run only for what this read left incomplete.
        if self._in_head:
            if self._head_bytes and self._clock != HEAD_CLOCK:
                self._set_clock(HEAD_CLOCK, self.limits.header_timeout_s)  # from the head's first byte on
        elif self._body_read or self._clock != BODY_CLOCK:
            self._set_clock(BODY_CLOCK, self.limits.body_read_timeout_s)  # from the last body bytes read

    def shutdown(self) -> None:
        """uvicorn's Server stopping: an idle connection closes now, a busy one after its answer."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    # --- httptools' callbacks ---------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._expect_100 = False
        self._forwarded = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        value = value.rstrip(b" \t")  # llhttp keeps trailing whitespace, which RFC 9110 §5.5 leaves out
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_100 = True
        elif self.trusted and (name == b"x-forwarded-for" or name == b"x-forwarded-proto"):
            self._forwarded = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._clock = NO_CLOCK  # the head's clock; the body's starts when this read is parsed (data_received)
        parser = self.parser
        if parser.should_upgrade() and self._websocket_upgrade():
            return
        version: str = parser.get_http_version()
        method: str = parser.get_method().decode("ascii")
        url: Any = httptools.parse_url(self._url)  # its stubs say bytes where a part can be None
        raw_path: bytes = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope: dict[str, Any] = {
            "type": "http", "asgi": self.asgi, "http_version": version, "server": self.server,
            "client": self.client, "scheme": self.scheme, "method": method, "root_path": self.root_path,
            "path": self.root_path + path, "raw_path": self.raw_root_path + raw_path,
            "query_string": url.query or b"", "headers": self._headers, "state": self.app_state.copy()}
        if self._forwarded:
            _apply_forwarded(scope, self.trusted_hosts)
        cycle = RequestCycle(scope, self.transport, self.flow, self.server_state.default_headers,
                             version != "1.0" and parser.should_keep_alive(), self._expect_100, self._answered,
                             self.access_log)
        app = self.app
        limit = self.limit_concurrency
        if limit is not None and (len(self.server_state.connections) >= limit
                                  or len(self.server_state.tasks) >= limit):
            LOG.warning("Exceeded concurrency limit.")
            app = cast(App, service_unavailable)  # uvicorn's own answer beyond `limit_concurrency`
        earlier, self.cycle = self.cycle, cycle
        if earlier is None or earlier.response_complete:
            self._run(cycle, app)
        else:  # pipelined: it waits for the answer before it
            self.flow.pause_reading()
            self.pipeline.append((cycle, app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return  # answered already (or a WebSocket's handshake, which has no cycle)
        self._body_read = True
        cycle.add_body(body)
        if cycle.body_size > HIGH_WATER:
            self.flow.pause_reading()

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes = True, 0
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self._clock = NO_CLOCK  # the answer may take minutes (a long generation): no clock on it
            cycle.body_ended()
        elif not self.pipeline:  # answered before its body ended (a refusal): idle from here, as after any answer
            self._set_clock(IDLE_CLOCK, self.keep_alive_s)

    # --- requests in turn -----------------------------------------------------------------------------
    def _run(self, cycle: RequestCycle, app: App) -> None:
        tasks = self.server_state.tasks
        task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(tasks.discard)
        tasks.add(task)

    def _answered(self) -> None:
        """The answer is sent: the next pipelined request runs, or the keep-alive clock starts."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop(0)
            self._run(cycle, app)
        else:
            self._set_clock(IDLE_CLOCK, self.keep_alive_s)

    # --- clocks ---------------------------------------------------------------------------------------
    def _set_clock(self, kind: int, delay_s: float) -> None:
        at = self.loop.time() + delay_s
        self._clock, self._deadline = kind, at
        timer = self._timer
        if timer is None or at < self._timer_at:
            if timer is not None:
                timer.cancel()
            self._timer, self._timer_at = self.loop.call_at(at, self._on_clock), at

    def _stop_clock(self) -> None:
        timer, self._timer, self._clock = self._timer, None, NO_CLOCK
        if timer is not None:
            timer.cancel()

    def _on_clock(self) -> None:
        self._timer = None
        kind = self._clock
        if kind == NO_CLOCK or self.transport.is_closing():
            return
        if self.loop.time() < self._deadline:  # moved on since this timer was set
            self._timer, self._timer_at = self.loop.call_at(self._deadline, self._on_clock), self._deadline
            return
        self._clock = NO_CLOCK
        if kind == HEAD_CLOCK:
            self._refuse(408, f"The request's headers did not arrive within {self.limits.header_timeout_s:g} s.")
        elif kind == BODY_CLOCK and self.flow.read_paused:
            self._set_clock(BODY_CLOCK, self.limits.body_read_timeout_s)  # the app is behind, not the client
        else:
            self.transport.close()  # idle, or mid-body: no answer can be framed; the app sees a disconnect

    # --- refusals and hand-overs ------------------------------------------------------------------------
    def _refuse(self, status: int, line: str) -> None:
        self._stop_clock()
        if self.transport.is_closing() or self._discarding:
            return
        self.transport.write(refusal(status, line))
        # A lingering close, as nginx's: closing with unread bytes would send a reset that makes the client's
        # kernel drop the answer; what still comes is read and dropped for LINGER_S, then the socket closes.
        self._discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def _bad_request(self) -> None:
        LOG.warning("Invalid HTTP request received.")
        message = b"Invalid HTTP request received."
        head = [STATUS_LINES[400], *(b"%b: %b\r\n" % header for header in self.server_state.default_headers)]
        self.transport.write(b"".join(head) + b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%b" % (len(message), message))
        self.transport.close()

    def _websocket_upgrade(self) -> bool:
        return self.config.ws_protocol_class is not None and any(
            name == b"upgrade" and value.lower() == b"websocket" for name, value in self._headers) and any(
            name == b"connection" and b"upgrade" in value.lower() for name, value in self._headers)

    def _upgrade(self) -> None:
        """httptools stopped at an upgrade: a WebSocket goes to uvicorn's protocol, any other is served as HTTP."""
        if not self._websocket_upgrade():
            LOG.warning("Unsupported upgrade request.")
            return
        self.server_state.connections.discard(self)  # type: ignore[arg-type]
        self._stop_clock()
        self._release()
        method: bytes = self.parser.get_method()
        head = [method, b" ", self._url, b" HTTP/1.1\r\n"]
        for name, value in self._headers:
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        websocket: Any = self.config.ws_protocol_class
        protocol = websocket(config=self.config, server_state=self.server_state, app_state=self.app_state)
        protocol.connection_made(self.transport)
        self.transport.set_protocol(protocol)
        protocol.data_received(b"".join(head))

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            OPEN.release(self.peer)


def _apply_forwarded(scope: dict[str, Any], trusted_hosts: Any) -> None:
    """A trusted peer's x-forwarded-proto and x-forwarded-for in the scope, as ProxyHeadersMiddleware sets them:
    the last proto given, if a known one; the client, the nearest address in the joined list not trusted."""
    proto: bytes | None = None
    addresses: list[bytes] = []
    for name, value in scope["headers"]:
        if name == b"x-forwarded-proto":
            proto = value
        elif name == b"x-forwarded-for":
            addresses.append(value)
    if proto is not None:
        scheme = proto.decode("latin1").strip()
        if scheme in ("http", "https", "ws", "wss"):
            scope["scheme"] = scheme
    if addresses:
        host, port = trusted_hosts.get_trusted_client_address(b", ".join(addresses).decode("latin1"))
        if host:  # an empty header names nobody: the peer stays the client
            scope["client"] = (host, port)


def guarded_protocol(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """What to give uvicorn's Config as `http=`: HttpConnection bound to `limits` (uvicorn calls it with its
    config and server state for each connection)."""
    return cast(type[asyncio.Protocol], functools.partial(HttpConnection, limits=limits))
