"""Exchange: one request's limits on its way through a proxy (the endpoint proxy and the model gateway
alike) — the size of its body, the deadline of its whole upstream exchange (connect to last byte; a client
may ask for 1-300 s with `x-request-timeout`) and the longest silence between two chunks of its answer.

Each costs the hot path next to nothing: the body is counted as its messages pass (buffered only when a
caller asks for it whole), the deadline is one `asyncio.timeout`, and the idle clock one stored time per
chunk, looked at by one timer per idle period instead of a timer per chunk.

How a limit ends a request: before the answer has started, an OpenAI-style error (400 for a bad
`x-request-timeout`, 413 `body_limit`, 504 `upstream_deadline`). After it has started, the answer is cut:
an event stream first gets a last `data: {"error": …}` event of its own, then the response is left
incomplete, so uvicorn closes the connection and the client reads an aborted body — as when the upstream
breaks mid-stream (gateway/edge/upstream.py): a reply that simply ended would pass for a whole one. The upstream
connection goes with it (cancelled mid-read, it is closed, never pooled half read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Coroutine
from typing import Any

from berth.kinds import REGISTRY
from berth.settings import REQUEST_TIMEOUT_RANGE_S, ProxyLimits
from gateway.edge.openai_errors import error_body
from gateway.edge.upstream import EVENT_ENDS, Receive, Send

log = logging.getLogger("berth.limits")

Headers = list[tuple[bytes, bytes]]
# How long the last error event may wait on a client that stopped reading: the cut must not hang on it.
LAST_EVENT_WAIT_S = 5.0
# The idle and deadline clocks: monotonic, read directly (a loop's `time()` costs a method call per chunk,
# and uvloop's is not this clock, so timers are set with `call_later`, never `call_at`).
_clock = time.monotonic

__all__ = ["BodyTooLarge", "Exchange", "ProxyLimits", "admit", "asked_timeout_s", "held_for"]


class BodyTooLarge(ValueError):
    """The request body passed the proxy's limit as it was received."""


def asked_timeout_s(headers: Headers) -> float | None:
    """The seconds a client asks for with `x-request-timeout`, None when it asks nothing; ValueError, whose
    text is the 400's message, for anything but a number of seconds in 1-300."""
    for name, value in headers:
        if name == b"x-request-timeout":
            text = value.decode("latin-1").strip()
            try:
                seconds = float(text)
            except ValueError:
                seconds = math.nan  # fails the range check below, as do "nan" and "inf"
            low, high = REQUEST_TIMEOUT_RANGE_S
            if not low <= seconds <= high:
                raise ValueError(f"x-request-timeout must be a number of seconds from {low:g} to {high:g}, "
                                 f"not {text[:40]!r}.")
            return seconds
    return None


def held_for(longest_s: float, headers: Headers) -> float:
    """How long a request may wait for a copy: `longest_s`, or less when its `x-request-timeout` asks less."""
    with contextlib.suppress(ValueError):  # refused at admission already; never worth a second answer
        asked = asked_timeout_s(headers)
        if asked is not None:
            return min(longest_s, asked)
    return longest_s


async def admit(limits: ProxyLimits, kind: str, name: str, headers: Headers, receive: Receive,
                send: Send) -> Exchange | None:
    """The request's Exchange, or None once it is refused: 400 for an `x-request-timeout` outside 1-300 s,
    413 for a Content-Length over the body limit (before a byte of the body is read). `kind` is the
    endpoint's process kind: OpenCode (not an OpenAI API) keeps its long-lived event stream and uploads
    unbounded. `name` is the request's target (an endpoint id) as its log lines name it; they never show the request."""
    facts = REGISTRY.get(kind)  # type: ignore[call-overload]  # a str finds its StrEnum key
    if facts is not None and not facts.openai_compatible:
        return Exchange(None, None, receive, send, name)
    try:
        asked, wrong = asked_timeout_s(headers), None
    except ValueError as error:
        asked, wrong = None, str(error)
    if wrong is not None:  # answered outside the handler: berth/compiled.py's rule for compiled modules
        await _answer(send, 400, "invalid_request_error", "x-request-timeout", "bad_request_timeout", wrong)
        return None
    exchange = Exchange(limits, asked or limits.upstream_deadline_s, receive, send, name)
    length = next((value for key, value in headers if key == b"content-length"), None)
    if length is not None and length.isdigit() and int(length) > limits.body_limit_bytes:
        await exchange.refuse_body()
        return None
    return exchange


class Exchange:
    """Wraps one request's `receive` and `send`: counts the body received, notes what the answer has sent,
    and `run` bounds the forwarding by the deadline and the idle clock. Without limits (an endpoint that
    is not an OpenAI API) it passes everything through."""

    __slots__ = ("_cancelling", "_cut", "_deadline_at", "_head", "_last", "_last_chunk_at", "_limits", "_name",
                 "_over", "_receive", "_received", "_replay", "_running", "_send", "_sending", "_task", "_timer",
                 "deadline_s", "started")

    def __init__(self, limits: ProxyLimits | None, deadline_s: float | None, receive: Receive, send: Send,
                 name: str) -> None:
        self._limits, self.deadline_s = limits, deadline_s
        self._receive, self._send, self._name = receive, send, name
        self._received = 0
        self._replay: list[dict[str, Any]] = []  # what `whole_body` read, handed on by `receive`
        self._over = False  # the body passed the limit while read whole
        self.started = False  # the answer's head has gone to the client
        self._head: Headers = []  # its headers
        self._last: dict[str, Any] = {}  # the last body message sent (does it end an event?)
        self._sending = False
        self._last_chunk_at = self._deadline_at = 0.0
        self._running = False  # the clocks are on
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._cancelling = 0
        self._cut = ""  # "deadline" or "idle" once `_tick` cancelled the work

    # --- the request ------------------------------------------------------------------------------
    async def receive(self) -> dict[str, Any]:
        if self._replay:
            return self._replay.pop(0)
        message = await self._receive()
        body = message.get("body")
        if body and self._limits is not None:
            self._received += len(body)
            if self._received > self._limits.body_limit_bytes:
                raise BodyTooLarge(f"request body over {self._limits.body_limit_bytes} bytes")
        return message

    async def whole_body(self) -> bytes | None:
        """The body read whole (`receive` hands it on as one message); None when it passed the limit (`run`
        and `refuse_body` answer 413) or the client left before sending it all."""
        parts: list[bytes] = []
        while True:
            try:
                message = await self.receive()
            except BodyTooLarge:
                self._over = True
                return None
            if message["type"] != "http.request":  # gone: what came, then the disconnect, is handed on
                self._replay += [{"type": "http.request", "body": b"".join(parts), "more_body": True}, message]
                return None
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                body = b"".join(parts)
                self._replay.append({"type": "http.request", "body": body, "more_body": False})
                return body

    @property
    def over(self) -> bool:
        """The body passed the limit while `whole_body` read it (None from it otherwise: the client left)."""
        return self._over

    async def refuse_body(self) -> None:
        """The 413: the body is over the limit."""
        if self._limits is None:
            return
        await _answer(self._send, 413, "invalid_request_error", None, "body_limit_bytes",
                      f"Request body is over the {_size(self._limits.body_limit_bytes)} limit of this proxy; "
                      "send a smaller one.")

    # --- the answer -------------------------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self._sending = True  # a client slow to read is not an idle upstream
            await self._send(message)
            self._sending = False
            self._last_chunk_at = _clock()
            self._last = message
            return
        if message["type"] == "http.response.start":
            self.started = True
            self._head = message.get("headers", [])
            self._last_chunk_at = _clock()
        await self._send(message)

    async def run(self, work: Coroutine[Any, Any, None]) -> None:
        """Await the forwarding `work` (it sends through `self.send`) within the deadline and the idle clock;
        answer 413 for a body over the limit, whether found before or as it streams upstream.

        One timer per request, not one per chunk nor a second one for the idle clock: it first fires when
        the sooner of the two could first pass and, while neither has, sets itself again (docs/performance.md:
        the proxy's whole per-chunk budget is a few microseconds)."""
        if self._over:
            work.close()  # never started: the request goes nowhere
            await self.refuse_body()
            return
        if self._limits is None or self.deadline_s is None:
            await work
            return
        self._running = True
        task = self._task = asyncio.current_task()
        assert task is not None
        self._cancelling = task.cancelling()
        self._deadline_at = _clock() + self.deadline_s
        self._timer = asyncio.get_running_loop().call_later(min(self.deadline_s, self._limits.stream_idle_s),
                                                            self._tick)
        # What ended the work is answered outside the handlers (berth/compiled.py's rule for compiled modules).
        cut = over = False
        try:
            await work
        except asyncio.CancelledError:
            # Ours only when `_tick` cancelled and no one else did too (as asyncio.timeout tells them apart).
            if not self._cut or task.uncancel() > self._cancelling:
                raise
            cut = True
        except BodyTooLarge:
            over = not self.started  # an upstream that answered early keeps its answer, cut
        finally:
            self._running = False
            self._timer.cancel()
        if cut:
            await self._cut_short()
        elif over:
            self._over = True
            await self.refuse_body()

    def _tick(self) -> None:
        limits, task = self._limits, self._task
        if not self._running or limits is None or task is None:
            return  # `run` is over
        now = _clock()
        idle_s = limits.stream_idle_s
        if now >= self._deadline_at:
            self._cut = "deadline"
        elif self.started and not self._sending and now - self._last_chunk_at >= idle_s:
            self._cut = "idle"
        else:
            # Not started, or sending to a slow client: the idle clock can pass no sooner than one period on.
            quiet_since = self._last_chunk_at if self.started and not self._sending else now
            self._timer = asyncio.get_running_loop().call_later(
                min(self._deadline_at, quiet_since + idle_s) - now, self._tick)
            return
        task.cancel()

    async def _cut_short(self) -> None:
        assert self._limits is not None and self.deadline_s is not None
        if not self.started:
            log.warning("request to %s: no answer within the %g s deadline; answered 504", self._name,
                        self.deadline_s)
            await _answer(self._send, 504, "timeout_error", None, "upstream_deadline",
                          f"The model did not answer within this request's {self.deadline_s:g} s deadline "
                          f"(x-request-timeout asks for {REQUEST_TIMEOUT_RANGE_S[0]:g}-"
                          f"{REQUEST_TIMEOUT_RANGE_S[1]:g} s).")
            return
        if self._cut == "idle":
            log.warning("request to %s: no chunk from upstream for %g s; stream ended", self._name,
                        self._limits.stream_idle_s)
            message, code = (f"No chunk came from the model for {self._limits.stream_idle_s:g} s: this reply is "
                             "incomplete; retry the request."), "stream_idle"
        else:
            log.warning("request to %s: the %g s deadline passed mid-answer; stream ended", self._name, self.deadline_s)
            message, code = (f"This request's {self.deadline_s:g} s deadline passed mid-stream: this reply is "
                             "incomplete."), "upstream_deadline"
        if not any(key == b"content-type" and value.lower().startswith(b"text/event-stream")
                   for key, value in self._head):
            return  # left incomplete: the server aborts the connection
        # Blank lines first when the cut falls inside an event: the error must be an event of its own.
        last = self._last.get("body", b"")
        separator = b"" if not last or last.endswith(EVENT_ENDS) else b"\n\n"
        event = b"data: " + error_body(message, "timeout_error", code) + b"\n\n"
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(LAST_EVENT_WAIT_S):
                await self._send({"type": "http.response.body", "body": separator + event, "more_body": True})


async def _answer(send: Send, status: int, kind: str, param: str | None, code: str, message: str) -> None:
    body = error_body(message, kind, code, param)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _size(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size}-byte"
