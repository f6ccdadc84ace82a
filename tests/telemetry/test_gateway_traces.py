"""The model gateway's spans, in process (as `run_gateway` wraps it): one SERVER span per request with its
copy and status and no prompt, the copy receives a traceparent of that span's trace, and `x-request-id`
comes back; the health probe and /metrics are not traced."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from berth.telemetry import make_tracing
from gateway.edge import routing
from gateway.edge.proxy_tracing import ProxyTracing, traced
from gateway.models.model_gateway import ModelGateway, Pool
from tests.telemetry.otlp_receiver import OtlpReceiver
from tests.telemetry.test_proxy_traces import PROMPT, _copy, _header

pytestmark = pytest.mark.timeout(60)


async def _call(app: Any, path: str, body: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "POST" if body else "GET", "query_string": b"",
               "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 5)}, receive, send)
    return int(sent[0]["status"]), list(sent[0]["headers"])


async def _run(endpoint: str) -> tuple[list[int], list[list[tuple[bytes, bytes]]], list[bytes]]:
    heads: list[bytes] = []
    server, url = await _copy(heads)
    tracing = make_tracing("berth-gateway", endpoint, timeout_s=1.0)
    gateway = ModelGateway(object())  # type: ignore[arg-type]  # no discovery: the pool is set here
    pool = Pool(endpoint_id="e1", workflow_id="wf", model_id="m", policy=routing.make("least_queue"))
    pool.replicas["c1"] = routing.Replica(copy_id="c1", url=url, ready=True,
                                          metrics=routing.ReplicaMetrics(scraped_at=time.monotonic()))
    gateway.pools["e1"] = pool
    app = traced(gateway, ProxyTracing(tracing.tracer, service="gateway"), "gateway")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": PROMPT}]}).encode()
    try:
        answers = [await _call(app, "/v1/chat/completions", body) for _ in range(3)]
        probes = [await _call(app, path, b"") for path in ("/health", "/metrics")]
    finally:
        await gateway.upstream.aclose()
        server.close()
        await asyncio.get_running_loop().run_in_executor(None, tracing.shutdown)  # flushes: off the loop
    return [status for status, _ in answers + probes], [headers for _, headers in answers], heads


def test_one_span_per_gateway_request_with_its_copy_and_the_copy_gets_its_traceparent(
        receiver: OtlpReceiver) -> None:
    statuses, answers, heads = asyncio.run(_run(receiver.url))
    assert statuses == [200] * 5
    spans = receiver.wait_spans(3, "berth.proxy.request")
    assert len(spans) == 3 and len(receiver.spans) == 3  # the probes made none
    assert all(s.attributes["berth.endpoint"] == "gateway" and s.attributes["berth.copy"] == "c1"
               and s.attributes["http.response.status_code"] == 200 for s in spans)
    assert {s.attributes["berth.request_id"] for s in spans} == {
        _header(headers, b"x-request-id")[0].decode() for headers in answers}
    by_span = {s.span_id: s for s in spans}
    for head in heads:
        (traceparent,) = _header(head, b"traceparent")
        _, trace_id, span_id, _ = traceparent.decode().split("-")
        assert by_span[span_id].trace_id == trace_id
    assert PROMPT.encode() not in b"".join(receiver.raw)
