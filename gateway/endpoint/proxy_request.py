"""ProxyRequest: one request on its way through the endpoint proxy's steps (gateway/endpoint/pipeline.py) — what
it asked for, whom it is from, where it goes and what its answer has been — and ObservedSend, the one `send` wrapper
that lets the request's observers (audit, usage, metrics, trace) see the answer as it leaves.

One object per request with fixed slots: it is the hot path (docs/performance.md), so no dataclass machinery, no
validation, and the observers are called from one chain instead of a `send` closure each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.edge.upstream import Receive, Send

if TYPE_CHECKING:
    from berth.security import Identity
    from gateway.edge.exchange import Exchange
    from gateway.edge.proxy_metrics import RequestClock
    from gateway.edge.proxy_tracing import TracedRequest
    from gateway.edge.routing import Replica
    from gateway.edge.upstream import Answer, UpstreamError
    from gateway.endpoint.audit_writer import AuditedRequest
    from gateway.endpoint.key_gate import KeyedRequest
    from gateway.endpoint.limits import Ticket
    from gateway.endpoint.route_table import Route
    from gateway.endpoint.usage import UsageMeter

Headers = list[tuple[bytes, bytes]]


class SeesStart(Protocol):
    def on_start(self, message: dict[str, Any]) -> dict[str, Any]:
        """The answer's head as it leaves; what it returns goes on (the trace swaps in its `x-request-id`)."""
        ...


class ObservedSend:
    """The client's `send`, each observer shown the message first: the one place the answer is watched. The observers
    are the request's audit record, usage meter, metrics clock and trace, outermost first as the `send` wrappers they
    replace were; only usage and metrics look at body chunks. It holds no reference to the ProxyRequest: a request
    that pointed at itself would wait for the cycle collector instead of going at once (~15 µs a request)."""

    __slots__ = ("_client_send", "_on_body", "_on_start")

    def __init__(self, client_send: Send, on_start: tuple[SeesStart, ...],
                 on_body: tuple[Callable[[bytes], None], ...]) -> None:
        self._client_send, self._on_start, self._on_body = client_send, on_start, on_body

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            body = message.get("body")
            if body:
                for on_body in self._on_body:
                    on_body(body)
        elif message["type"] == "http.response.start":
            for observer in self._on_start:
                message = observer.on_start(message)
        await self._client_send(message)


class ProxyRequest:
    """One request through the endpoint proxy. The steps fill it in as they learn: `route` (the route step),
    `identity`, `keyed` and `strip_authorization` (credentials; scope may drop a foreign caller), `ticket` and
    `body` (limits), `exchange` (its deadline), `session_id` and `target` (hold), the upstream attempt (forward,
    retry). `receive` and `send` are the ones the next step uses: a step that reads the body ahead, or adds to the
    answer, replaces them."""

    __slots__ = ("audit", "before", "body", "clock", "endpoint_id",
                 "exchange", "failure", "headers", "identity", "keyed", "method", "meter", "path",
                 "receive", "renewed", "response", "rest", "retriable", "route", "scope", "send", "session_id",
                 "strip_authorization", "target", "ticket", "trace", "upstream_body")

    def __init__(self, trace: TracedRequest, receive: Receive, send: Send, endpoint_id: str, rest: str,
                 audit: AuditedRequest, meter: UsageMeter, clock: RequestClock, timed: bool) -> None:
        self.trace, self.audit, self.meter, self.clock = trace, audit, meter, clock
        self.scope: dict[str, Any] = trace.scope  # its headers go upstream (x-request-id, traceparent)
        self.headers: Headers = self.scope["headers"]
        self.endpoint_id, self.rest = endpoint_id, rest
        self.receive = receive
        # The answer's observers: usage, audit, metrics (when on), trace.
        self.send: Send = ObservedSend(send, (meter, audit, clock, trace), (meter.on_body, clock.on_body)) if timed \
            else ObservedSend(send, (meter, audit, trace), (meter.on_body,))
        self.route: Route | None = None
        self.identity: Identity | None = None
        self.keyed: KeyedRequest | None = None
        self.strip_authorization = False
        self.body: bytes | None = None  # the request body when a step read it whole (a key's model, a limit)
        self.ticket: Ticket | None = None
        self.exchange: Exchange | None = None
        self.session_id: str | None = None
        self.target: Replica | None = None
        # The upstream attempt (gateway/endpoint/steps/forward.py, retry.py).
        self.method = ""
        self.path = ""
        self.upstream_body: bytes | AsyncIterator[bytes] = b""
        self.retriable = False
        self.renewed: Callable[[], Headers] | None = None
        self.before: frozenset[str] | None = None
        self.response: Answer | None = None
        self.failure: UpstreamError | None = None
