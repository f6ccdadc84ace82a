"""ProxyTracing: the proxies' request ids and spans. Every answer carries `x-request-id` (a caller's own when
short and safe, else the proxy's); with tracing on (BERTH_OTEL_ENDPOINT, berth/telemetry.py) each request
is one SERVER span, child of the caller's `traceparent` when it sent one, whose own `traceparent` and
`tracestate` replace the caller's on the way upstream (to the copy's vLLM, or the endpoint's LiteLLM).

A span records the endpoint, the status, the copy, the tokens the answer reported and the request id:
never a prompt, a body, a header, a user or a key (docs/operations.md)."""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from berth.log_format import request_id as request_id_var
from berth.telemetry import installed_tracer

Send = Callable[[dict[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]
SAFE_ID = re.compile(rb"[A-Za-z0-9._-]{1,64}")
REQUEST_ID = b"x-request-id"
# Replaced on the way upstream: the proxy's own span is the copy's parent, and the copy logs the proxy's id.
REPLACED = frozenset({b"traceparent", b"tracestate", REQUEST_ID})
PROPAGATOR = TraceContextTextMapPropagator()
SPAN_NAME = "berth.proxy.request"
UNTRACED = frozenset({"/health", "/healthz", "/metrics"})  # probes and scrapes: no span, no id


def caller_request_id(headers: Headers) -> str | None:
    """The caller's x-request-id when it is 1-64 of [A-Za-z0-9._-]; anything else is not echoed anywhere."""
    for name, value in headers:
        if name == REQUEST_ID:
            return value.decode("ascii") if SAFE_ID.fullmatch(value) else None
    return None


class TracedRequest:
    """One request's id, span (None with tracing off) and the scope whose headers go upstream."""

    __slots__ = ("_attached", "_reset", "id", "scope", "span", "status")

    def __init__(self, scope: dict[str, Any], request_id: str, span: trace.Span | None) -> None:
        self.id, self.span, self.status = request_id, span, 0
        self._reset = request_id_var.set(request_id)
        self._attached = otel_context.attach(trace.set_span_in_context(span)) if span is not None else None
        headers: Headers = scope["headers"]
        outgoing = [(name, value) for name, value in headers if name not in REPLACED]
        outgoing.append((REQUEST_ID, request_id.encode()))
        if span is not None:
            carrier: dict[str, str] = {}
            PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
            outgoing.extend((name.encode(), value.encode()) for name, value in carrier.items())
        self.scope = {**scope, "headers": outgoing}

    def on_start(self, message: dict[str, Any]) -> dict[str, Any]:
        """The answer's head with `x-request-id` (in place of any upstream one); notes the status."""
        self.status = message["status"]
        return {**message, "headers": [*(h for h in message.get("headers", ()) if h[0] != REQUEST_ID),
                                       (REQUEST_ID, self.id.encode())]}

    def watch(self, send: Send) -> Send:
        """`send` that answers with `x-request-id` (in place of any upstream one) and notes the status."""
        async def tagged(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = self.on_start(message)
            await send(message)

        return tagged

    def end(self, copy_id: str | None = None, tokens: tuple[int, int] | None = None) -> None:
        """Close the span with what the proxy learnt; safe to call once per request."""
        request_id_var.reset(self._reset)
        span = self.span
        if span is None:
            return
        if self._attached is not None:
            otel_context.detach(self._attached)
        span.set_attribute("http.response.status_code", self.status)
        if copy_id:
            span.set_attribute("berth.copy", copy_id)
        if tokens is not None and any(tokens):
            span.set_attribute("berth.tokens_in", tokens[0])
            span.set_attribute("berth.tokens_out", tokens[1])
        if self.status == 0 or self.status >= 500:
            span.set_status(trace.Status(trace.StatusCode.ERROR))
        span.end()


class ProxyTracing:
    """`tracer` None: the process's (berth/telemetry.setup_tracing), or no spans when tracing is off."""

    def __init__(self, tracer: trace.Tracer | None = None, service: str = "proxy") -> None:
        self.tracer = tracer or installed_tracer(f"berth.{service}")
        self._prefix = uuid.uuid4().hex[:12]  # ids unique across processes, without a uuid per request
        self._numbers = itertools.count(1)

    def begin(self, scope: dict[str, Any], endpoint: str, made_id: str | None = None) -> TracedRequest:
        """The request's id (the caller's safe one, else `made_id`, else a new one) and, tracing on, its span."""
        headers: Headers = scope["headers"]
        request_id = caller_request_id(headers) or made_id or f"{self._prefix}-{next(self._numbers)}"
        span = None
        if self.tracer is not None:
            carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers
                       if name in (b"traceparent", b"tracestate")}
            parent = PROPAGATOR.extract(carrier) if carrier else None
            attributes: dict[str, str] = {"berth.endpoint": endpoint, "berth.request_id": request_id,
                                          "http.request.method": scope.get("method", "")}
            if made_id is not None and made_id != request_id:
                attributes["berth.audit_id"] = made_id  # the audit row's id, when the caller named the request
            span = self.tracer.start_span(SPAN_NAME, context=parent, kind=trace.SpanKind.SERVER,
                                          attributes=attributes)
        return TracedRequest(scope, request_id, span)


def traced(app: Callable[..., Awaitable[None]], tracing: ProxyTracing, endpoint: str
           ) -> Callable[..., Awaitable[None]]:
    """An ASGI app whose HTTP requests are traced as one endpoint's (the model gateway: no audit rows)."""
    async def wrapped(scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED:
            await app(scope, receive, send)
            return
        request = tracing.begin(scope, endpoint)
        try:
            await app(request.scope, receive, request.watch(send))
        finally:
            request.end()

    return wrapped
