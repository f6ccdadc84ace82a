"""ProxyRequest's one observed `send`: the answer's head goes to usage, audit, metrics and trace (which swaps in its
`x-request-id`), each non-empty body chunk to usage and metrics; with metrics off, the clock is left alone."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.edge.proxy_metrics import RequestClock
from gateway.edge.proxy_tracing import ProxyTracing
from gateway.endpoint.audit_writer import AuditWriter
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.usage import Usage, UsageMeter

ANSWER = json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}).encode()


async def _nothing(records: Any) -> None:
    return None


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def _answered(timed: bool) -> tuple[ProxyRequest, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def client(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/endpoints/ep/v1/chat/completions",
             "headers": [(b"x-request-id", b"mine-1")]}
    audit = AuditWriter(_nothing).request("ep")
    trace = ProxyTracing(tracer=None).begin(scope, "ep", audit.request_id)
    request = ProxyRequest(trace, _receive, client, "ep", "v1/chat/completions", audit, UsageMeter(), RequestClock(),
                           timed)

    async def answer() -> None:
        await request.send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"upstream")]})
        await request.send({"type": "http.response.body", "body": ANSWER[:9], "more_body": True})
        await request.send({"type": "http.response.body", "body": ANSWER[9:], "more_body": True})
        await request.send({"type": "http.response.body", "body": b"", "more_body": False})

    asyncio.run(answer())
    trace.end()
    return request, sent


def test_one_send_feeds_every_observer_and_tags_the_answer() -> None:
    request, sent = _answered(timed=True)
    assert sent[0]["headers"] == [(b"content-type", b"application/json"), (b"x-request-id", b"mine-1")]
    assert [m.get("body") for m in sent[1:]] == [ANSWER[:9], ANSWER[9:], b""]
    assert request.audit.status == 200 and request.trace.status == 200
    assert request.meter.usage() == Usage(4, 2, 6)
    assert request.clock.status == 200 and request.clock.chunks == 2 and request.clock.first_byte is not None


def test_with_metrics_off_the_clock_is_not_kept() -> None:
    request, _ = _answered(timed=False)
    assert request.audit.status == 200 and request.meter.usage() == Usage(4, 2, 6)
    assert request.clock.status == 0 and request.clock.chunks == 0 and request.clock.answered is None
