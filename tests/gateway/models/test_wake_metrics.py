"""Wake-ups and held requests in the Prometheus figures (issue 19): the endpoint proxy and the model
gateway, in process with their real upstream pools, each count one wake call for a pool at zero, show the
request as held while it waits, and count it by its endpoint or model once a copy answers. The model
gateway's figures are its own names (`berth_model_gateway_*`), by model; a made-up model mints no series."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from berth.contracts import WakeResult
from berth.security import SigningKey, TokenVerifier
from gateway.edge import routing
from gateway.edge.proxy_metrics import ProxyMetrics
from gateway.models.model_gateway import ModelGateway, Pool
from tests.gateway.endpoint.test_endpoint_proxy_audit import _copy
from tests.gateway.endpoint.test_endpoint_proxy_lost_copy import PoolApi, _answer, _litellm, _proxy, _until
from tests.gateway.endpoint.test_endpoint_proxy_unavailable import _ask

pytestmark = pytest.mark.timeout(60)


def _value(metrics: ProxyMetrics, name: str, **labels: str) -> float:
    text = generate_latest(metrics.registry).decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


class WakingApi(PoolApi):
    """A LiteLLM-fronted pool at zero: the wake call says it was asleep; the test makes its copy ready."""

    async def wake_endpoint(self, endpoint_id: str, reason: str) -> WakeResult:
        self.wakes += 1
        return WakeResult(endpoint_id=endpoint_id, workflow_id="wf-1", woken=True, phase="starting")


def test_the_endpoint_proxy_counts_its_wake_call_and_the_held_request(tmp_path: Path) -> None:
    async def main() -> tuple[int, float, float, float, int]:
        server, _seen = await _litellm(lambda n: _answer(200, b'{"ok":true}'))
        api = WakingApi(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        proxy = _proxy(api, TokenVerifier.from_jwks(SigningKey.load_or_create(tmp_path).jwks()))
        api.copies = {}  # scaled to zero
        asking = asyncio.ensure_future(_ask(proxy))
        await _until(lambda: api.wakes >= 1 and bool(proxy.holds.held.get("ep-1")))
        held = _value(proxy.metrics, "berth_proxy_held_requests")
        api.copies = {"c1": True}
        status, _headers, _body = await asking
        server.close()
        return (status, held, _value(proxy.metrics, "berth_proxy_wakeups_total", endpoint="ep-1"),
                _value(proxy.metrics, "berth_proxy_held_requests"), api.wakes)

    status, held, wakeups, held_after, wakes = asyncio.run(main())
    assert status == 200 and held == 1 and held_after == 0
    assert wakeups == wakes >= 1


class GatewayApi:
    """What the model gateway asks of the API here: discovery fails (the pool is set by the test) and a wake
    call makes the pool's copy ready, as a started copy would be."""

    def __init__(self) -> None:
        self.pool: Pool | None = None
        self.held_seen: list[float] = []
        self.metrics: ProxyMetrics | None = None

    async def endpoints(self) -> list[Any]:
        from berth.errors import UnavailableError
        raise UnavailableError("no discovery in this test")

    async def wake_endpoint(self, endpoint_id: str, reason: str) -> WakeResult:
        assert self.pool is not None and self.metrics is not None
        self.held_seen.append(_value(self.metrics, "berth_model_gateway_held_requests"))
        for replica in self.pool.replicas.values():
            replica.ready = True
        return WakeResult(endpoint_id=endpoint_id, workflow_id="wf", woken=True, phase="starting")


async def _post(gateway: ModelGateway, body: dict[str, Any]) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await gateway({"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": [],
                   "query_string": b""}, receive, send)
    return int(sent[0]["status"])


async def test_the_model_gateway_counts_requests_wakeups_and_refusals_by_model() -> None:
    copy, url = await _copy()
    api = GatewayApi()
    gateway = ModelGateway(api)  # type: ignore[arg-type]
    api.metrics = gateway.metrics
    pool = Pool(endpoint_id="e1", workflow_id="wf", model_id="m", policy=routing.make("least_queue"))
    pool.replicas["c1"] = routing.Replica(copy_id="c1", url=url, ready=False,
                                          metrics=routing.ReplicaMetrics(scraped_at=time.monotonic()))
    gateway.pools["e1"] = api.pool = pool
    chat = {"messages": [{"role": "user", "content": "the prompt nobody may label"}]}
    try:
        assert await _post(gateway, {"model": "m", **chat}) == 200  # woken from zero, then answered
        for _ in range(2):
            assert await _post(gateway, {"model": "m", **chat}) == 200
        assert await _post(gateway, {"model": "made-up-by-a-caller", **chat}) == 400
        assert await _post(gateway, chat) == 400
    finally:
        await gateway.upstream.aclose()
        copy.close()
    m = gateway.metrics
    assert api.held_seen == [1] and _value(m, "berth_model_gateway_held_requests") == 0
    assert _value(m, "berth_model_gateway_wakeups_total", model="m") == 1
    assert _value(m, "berth_model_gateway_requests_total", model="m", code="200") == 3
    assert _value(m, "berth_model_gateway_added_latency_seconds_count", model="m") == 3
    assert _value(m, "berth_model_gateway_refusals_total", model="unknown", reason="bad_request") == 1
    assert _value(m, "berth_model_gateway_refusals_total", model="none", reason="bad_request") == 1
    text = generate_latest(m.registry).decode()
    assert "made-up" not in text and "prompt" not in text


async def test_a_copy_that_does_not_answer_counts_as_an_upstream_error() -> None:
    gateway = ModelGateway(GatewayApi())  # type: ignore[arg-type]
    pool = Pool(endpoint_id="e1", workflow_id="wf", model_id="m", policy=routing.make("least_queue"))
    pool.replicas["c1"] = routing.Replica(copy_id="c1", url="http://127.0.0.1:9", ready=True,
                                          metrics=routing.ReplicaMetrics(scraped_at=time.monotonic()))
    gateway.pools["e1"] = pool
    try:
        assert await _post(gateway, {"model": "m", "prompt": "hi"}) == 502
    finally:
        await gateway.upstream.aclose()
    assert _value(gateway.metrics, "berth_model_gateway_upstream_errors_total", model="m") == 1
    assert _value(gateway.metrics, "berth_model_gateway_requests_total", model="m", code="502") == 1
