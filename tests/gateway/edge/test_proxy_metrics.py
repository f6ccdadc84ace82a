"""The endpoint proxy's Prometheus figures, in process: the real proxy (routing table from the real API app)
in front of a copy on loopback. Counters match the requests sent, refusals carry their reason, a made-up
endpoint id counts as `unknown` (no caller mints series), no user or token is a label, and /metrics answers
loopback callers only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from berth.api_client import ApiClient
from berth.security import TokenVerifier
from berth.settings import metrics_enabled
from gateway.edge.proxy_metrics import ProxyMetrics
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy
from server.app import build_context, create_app
from tests.gateway.endpoint.test_endpoint_proxy_audit import ADMIN, ALICE, _ask, _copy, _publish


async def _scrape(proxy: EndpointProxy, client: str = "127.0.0.1") -> tuple[int, str]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await proxy({"type": "http", "path": "/metrics", "method": "GET", "headers": [], "query_string": b"",
                 "client": (client, 40000)}, receive, send)
    return int(sent[0]["status"]), sent[1]["body"].decode()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def test_the_proxy_counts_requests_refusals_and_latency_by_endpoint(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    copy, url = await _copy()
    _publish(context, "ep-up", url)
    api = ApiClient("http://api", context.signing.api_token(ADMIN),
                    transport=httpx.ASGITransport(app=create_app(context)))
    proxy = EndpointProxy(api, TokenVerifier.from_jwks(context.signing.jwks()),
                          upstream=UpstreamPool(connect_timeout_s=2))
    try:
        await proxy.refresh()
        token = context.signing.endpoint_token(ALICE, "ep-up", 600)
        for _ in range(3):
            assert await _ask(proxy, "ep-up", token) == 200
        assert await _ask(proxy, "ep-up", None) == 401
        assert await _ask(proxy, "ep-made-up-by-a-caller", token) == 404
        status, text = await _scrape(proxy)
        refused, _ = await _scrape(proxy, client="203.0.113.9")
    finally:
        await api.aclose()
        await proxy.upstream.aclose()
        copy.close()
    assert status == 200 and refused == 403
    samples = _samples(text)

    def value(name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    assert value("berth_proxy_requests_total", endpoint="ep-up", code="200") == 3
    assert value("berth_proxy_requests_total", endpoint="ep-up", code="401") == 1
    assert value("berth_proxy_requests_total", endpoint="unknown", code="404") == 1
    assert value("berth_proxy_refusals_total", endpoint="ep-up", reason="auth") == 1
    assert value("berth_proxy_refusals_total", endpoint="unknown", reason="unknown_endpoint") == 1
    assert value("berth_proxy_request_duration_seconds_count", endpoint="ep-up") == 4
    assert value("berth_proxy_added_latency_seconds_count", endpoint="ep-up") == 3  # answered by the copy
    assert value("berth_proxy_streamed_chunks_total", endpoint="ep-up") >= 3
    assert "ep-made-up" not in text and "alice" not in text and token not in text


async def test_metrics_off_records_nothing_and_serves_no_page(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")
    copy, url = await _copy()
    _publish(context, "ep-up", url)
    api = ApiClient("http://api", context.signing.api_token(ADMIN),
                    transport=httpx.ASGITransport(app=create_app(context)))
    proxy = EndpointProxy(api, TokenVerifier.from_jwks(context.signing.jwks()),
                          upstream=UpstreamPool(connect_timeout_s=2), metrics=ProxyMetrics(enabled=False))
    try:
        await proxy.refresh()
        assert await _ask(proxy, "ep-up", context.signing.endpoint_token(ALICE, "ep-up", 600)) == 200
        status, _ = await _scrape(proxy)
    finally:
        await api.aclose()
        await proxy.upstream.aclose()
        copy.close()
    assert status == 404
    assert "ep-up" not in generate_latest(proxy.metrics.registry).decode()


def test_berth_metrics_is_on_or_off() -> None:
    assert metrics_enabled({}) and metrics_enabled({"BERTH_METRICS": "ON "}) and not metrics_enabled(
        {"BERTH_METRICS": "off"})
    with pytest.raises(SystemExit, match="BERTH_METRICS must be on or off"):
        metrics_enabled({"BERTH_METRICS": "sometimes"})
