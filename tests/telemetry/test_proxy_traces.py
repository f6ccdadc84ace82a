"""The endpoint proxy's spans, in process, exported to a local OTLP/HTTP receiver: one SERVER span per
request with the endpoint, status, copy, tokens and request id; no prompt in the exported bytes; the copy
(a loopback HTTP server) receives a traceparent of the span's trace; a caller's traceparent is the parent;
`x-request-id` comes back on every answer. With the receiver down the requests still succeed and the
failure is logged once."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from berth.contracts import RoutesTable
from berth.security import SigningKey, TokenVerifier
from berth.telemetry import make_tracing
from gateway.edge.proxy_tracing import ProxyTracing
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.telemetry.otlp_receiver import OtlpReceiver

PROMPT = "the-lighthouse-keeper-hides-the-brass-key"
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
pytestmark = pytest.mark.timeout(60)


class FakeApi:
    def __init__(self, copy_url: str) -> None:
        self.copy_url = copy_url

    async def routes(self) -> RoutesTable:
        return RoutesTable.model_validate({"endpoints": [{
            "id": "ep1", "scope": "public", "owner": "alice", "org": "acme", "groups": [], "service": "vllm",
            "copy_urls": [self.copy_url]}]})

    async def append_audit(self, batch: Any) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def _copy(heads: list[bytes]) -> tuple[asyncio.Server, str]:
    """A copy that notes each request's head and answers with usage."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            heads.append(head)
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            body = b'{"choices":[{"message":{"content":"aye"}}],"usage":{"prompt_tokens":9,"completion_tokens":2}}'
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: theirs\r\n"
                         b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _ask(proxy: EndpointProxy, extra: list[tuple[bytes, bytes]]) -> tuple[int, list[tuple[bytes, bytes]]]:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": PROMPT}]}).encode()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"authorization", b"Bearer sk-not-berths"), *extra]
    await proxy({"type": "http", "path": "/endpoints/ep1/v1/chat/completions", "method": "POST",
                 "headers": headers, "query_string": b""}, receive, send)
    return int(sent[0]["status"]), list(sent[0]["headers"])


async def _run(tmp_path: Any, endpoint: str, count: int, extra: list[tuple[bytes, bytes]]
               ) -> tuple[list[int], list[list[tuple[bytes, bytes]]], list[bytes]]:
    heads: list[bytes] = []
    server, url = await _copy(heads)
    key = SigningKey.load_or_create(tmp_path)
    tracing = make_tracing("berth-proxy", endpoint, timeout_s=1.0)
    proxy = EndpointProxy(FakeApi(url), TokenVerifier.from_jwks(key.jwks()))  # type: ignore[arg-type]
    proxy.tracing = ProxyTracing(tracing.tracer)
    try:
        await proxy.refresh()
        answers = [await _ask(proxy, extra) for _ in range(count)]
    finally:
        await proxy.upstream.aclose()
        server.close()
        await asyncio.get_running_loop().run_in_executor(None, tracing.shutdown)  # flushes: off the loop
    return [status for status, _ in answers], [headers for _, headers in answers], heads


def _header(headers: list[tuple[bytes, bytes]] | bytes, name: bytes) -> list[bytes]:
    if isinstance(headers, bytes):
        lines = [line.split(b":", 1) for line in headers.split(b"\r\n")[1:] if b":" in line]
        return [value.strip() for key, value in lines if key.strip().lower() == name]
    return [value for key, value in headers if key == name]


def test_one_span_per_request_with_its_facts_and_no_prompt(receiver: OtlpReceiver, tmp_path: Any) -> None:
    statuses, answers, heads = asyncio.run(_run(tmp_path, receiver.url, 5, []))
    assert statuses == [200] * 5
    spans = receiver.wait_spans(5, "berth.proxy.request")
    assert len(spans) == 5 and all(s.kind == 2 for s in spans)  # SPAN_KIND_SERVER
    ids = [_header(headers, b"x-request-id") for headers in answers]
    assert all(len(found) == 1 for found in ids)  # the proxy's, in place of the copy's own
    assert {s.attributes["berth.request_id"] for s in spans} == {found[0].decode() for found in ids}
    for span in spans:
        assert span.attributes["berth.endpoint"] == "ep1"
        assert span.attributes["http.response.status_code"] == 200
        assert span.attributes["berth.copy"]
        assert (span.attributes["berth.tokens_in"], span.attributes["berth.tokens_out"]) == (9, 2)
        assert set(span.attributes) <= {"berth.endpoint", "berth.request_id", "http.request.method",
                                        "http.response.status_code", "berth.copy", "berth.tokens_in",
                                        "berth.tokens_out", "berth.audit_id"}
    exported = b"".join(receiver.raw)
    assert PROMPT.encode() not in exported and b"sk-not-berths" not in exported
    by_span = {s.span_id: s for s in spans}
    for head in heads:
        (traceparent,) = _header(head, b"traceparent")
        _, trace_id, span_id, _ = traceparent.decode().split("-")
        assert by_span[span_id].trace_id == trace_id
        assert _header(head, b"x-request-id")[0].decode() == by_span[span_id].attributes["berth.request_id"]


def test_a_callers_traceparent_and_safe_request_id_are_kept(receiver: OtlpReceiver, tmp_path: Any) -> None:
    extra = [(b"traceparent", f"00-{CALLER_TRACE}-b7ad6b7169203331-01".encode()), (b"x-request-id", b"job-42.a")]
    _, answers, heads = asyncio.run(_run(tmp_path, receiver.url, 1, extra))
    (span,) = receiver.wait_spans(1, "berth.proxy.request")
    assert span.trace_id == CALLER_TRACE and span.parent_span_id == "b7ad6b7169203331"
    assert _header(answers[0], b"x-request-id") == [b"job-42.a"]
    assert _header(heads[0], b"traceparent")[0].decode().split("-")[1] == CALLER_TRACE
    unsafe = [(b"x-request-id", b"a b\x01" + b"x" * 80)]
    _, answers, _ = asyncio.run(_run(tmp_path, receiver.url, 1, unsafe))
    assert _header(answers[0], b"x-request-id")[0] != unsafe[0][1]


def test_receiver_down_requests_succeed_and_one_line_is_logged(tmp_path: Any, caplog: pytest.LogCaptureFixture
                                                               ) -> None:
    down = OtlpReceiver()  # bound, never started, then closed: its port refuses
    url = down.url
    down._server.server_close()
    caplog.set_level(logging.INFO)
    statuses, answers, _ = asyncio.run(_run(tmp_path, url, 4, []))
    assert statuses == [200] * 4 and all(_header(h, b"x-request-id") for h in answers)
    lines = [r for r in caplog.records if "span export" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


def test_tracing_off_still_returns_request_ids(tmp_path: Any) -> None:
    statuses, answers, heads = asyncio.run(_run(tmp_path, None, 2, []))  # type: ignore[arg-type]
    assert statuses == [200, 200]
    assert all(_header(h, b"x-request-id") for h in answers)
    assert not any(_header(head, b"traceparent") for head in heads)
