"""Issue 29, finding 10: the API's spans recorded a request's URL query (`DELETE /v1/secrets?ref=secret://…` put the
secret's reference in `url.query`). Every span Berth exports (berth/telemetry.py) carries a query's names with
its values redacted, whoever recorded it (FastAPI's own server spans, an HTTP instrumentation's `http.url`,
`url.full`, `http.target`). In process: the real API app, its spans exported to OpenTelemetry's in-memory
exporter through Berth's own tracing pipeline."""

from __future__ import annotations

from pathlib import Path

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from berth.security import Identity
from berth.telemetry import make_tracing
from server.app import build_context, create_app

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
SECRET_NAME = "the-teams-hf-token"


async def test_the_apis_spans_carry_no_query_value(tmp_path: Path) -> None:
    exported = InMemorySpanExporter()
    tracing = make_tracing("berth-server", "http://127.0.0.1:9", exporter=exported)  # the collector: unused
    context = build_context(tmp_path, "127.0.0.1:1")
    app = create_app(context, tracer_provider=tracing.provider)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                 headers={"Authorization": f"Bearer {context.signing.api_token(ADMIN)}"}) as api:
        response = await api.delete("/v1/secrets", params={"ref": f"secret://user/{SECRET_NAME}", "force": "1"})
    assert response.status_code == 404
    assert tracing.flush()
    spans = exported.get_finished_spans()
    [server] = [span for span in spans if span.name == "DELETE /v1/secrets"]
    assert server.attributes is not None
    assert server.attributes["url.query"] == "ref=REDACTED&force=REDACTED"
    assert server.attributes["url.path"] == "/v1/secrets"
    recorded = repr([(span.name, dict(span.attributes or {}), [dict(e.attributes or {}) for e in span.events])
                     for span in spans])
    assert SECRET_NAME not in recorded and "secret%3A" not in recorded and "secret://" not in recorded
    tracing.shutdown()


def test_urls_an_http_instrumentation_records_keep_their_path_only() -> None:
    exported = InMemorySpanExporter()
    tracing = make_tracing("berth-proxy", "http://127.0.0.1:9", exporter=exported)
    attributes = {"http.url": "https://api:8443/v1/secrets?ref=secret%3A%2F%2Fuser%2Fx#frag",
                  "url.full": "http://h/p?token=abc&a=", "http.target": "/v1/x?key=bk_123", "url.query": "ref=x"}
    tracing.tracer.start_span("GET", attributes=attributes).end()
    assert tracing.flush()
    [span] = exported.get_finished_spans()
    assert dict(span.attributes or {}) == {"http.url": "https://api:8443/v1/secrets?ref=REDACTED",
                                           "url.full": "http://h/p?token=REDACTED&a=REDACTED",
                                           "http.target": "/v1/x?key=REDACTED", "url.query": "ref=REDACTED"}
    tracing.shutdown()
