"""`berth top`: the rate and quantile math (Prometheus's increase() and histogram_quantile() semantics) on
hand-made and real ProxyMetrics scrapes, and `berth top --once` run as a real process against a real
endpoint proxy under uvicorn in front of the engine simulator, with the real API on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from berth.api_client import ApiClient
from berth.security import TokenVerifier
from cli.top_figures import Scrape, endpoint_figures, histogram_quantile, increase, parse_scrape
from gateway.edge.proxy_metrics import ProxyMetrics, RequestClock
from gateway.endpoint.endpoint_proxy import EndpointProxy
from server.app import build_context
from simulator.testing import start_simulator
from tests.cli.loopback_api import serve_api
from tests.gateway.endpoint.test_endpoint_proxy_audit import ADMIN, ALICE, _publish
from tests.gateway.pool_copies import serving

REPO = Path(__file__).resolve().parents[2]
INF = math.inf


def test_histogram_quantile_interpolates_as_prometheus_does() -> None:
    buckets = [(0.1, 10.0), (0.5, 20.0), (INF, 20.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)  # rank 10: the first bucket's top
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.3)  # halfway through (0.1, 0.5]
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.05)  # the first bucket starts at 0
    assert histogram_quantile(0.99, [(0.1, 1.0), (INF, 100.0)]) == 0.1  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None  # no observations: NaN
    assert histogram_quantile(0.5, [(0.1, 3.0), (0.5, 4.0)]) is None  # no +Inf bucket: NaN
    assert histogram_quantile(0.5, [(0.5, 4.0), (INF, 4.0), (0.1, 3.0)]) == pytest.approx(0.1 * 2 / 3)  # unsorted
    assert histogram_quantile(0.5, [(0.1, 6.0), (0.5, 5.0), (INF, 6.0)]) == pytest.approx(0.05)  # evened out
    assert histogram_quantile(-1, buckets) == -INF and histogram_quantile(2, buckets) == INF


def test_increase_counts_a_reset_from_zero() -> None:
    assert increase(5, 8) == 3 and increase(None, 4) == 4 and increase(9, 2) == 2


def _scrape(metrics: ProxyMetrics, at: float) -> Scrape:
    return parse_scrape(generate_latest(metrics.registry).decode(), at)


def test_endpoint_figures_from_two_real_proxy_scrapes() -> None:
    metrics = ProxyMetrics()
    for _ in range(5):
        metrics.finished("ep-old", 200, True, RequestClock())  # before the interval: not counted
    before = _scrape(metrics, at=100.0)
    for status in (200, 200, 200, 502):
        metrics.finished("ep-a", status, True, RequestClock())
    after = _scrape(metrics, at=102.0)
    rows = {row.endpoint: row for row in endpoint_figures(before, after, {"ep-a": 2, "ep-idle": 1})}
    assert set(rows) == {"ep-a", "ep-idle", "ep-old"}
    busy = rows["ep-a"]
    assert busy.requests_per_s == 2.0 and busy.error_rate == 0.25 and busy.copies == 2
    assert busy.p50_s is not None and busy.p99_s is not None and 0 < busy.p50_s <= busy.p99_s <= 0.001
    assert rows["ep-old"].requests_per_s == 0 and rows["ep-old"].p99_s is None and rows["ep-old"].copies is None
    assert rows["ep-idle"].error_rate is None and rows["ep-idle"].copies == 1
    with pytest.raises(ValueError):
        endpoint_figures(after, before, {})


@contextlib.asynccontextmanager
async def _proxy(api_url: str, token: str, verifier: TokenVerifier) -> AsyncIterator[str]:
    api = ApiClient(api_url, token)
    proxy = EndpointProxy(api, verifier)
    await proxy.refresh()
    try:
        async with serving(proxy) as url:
            yield url
    finally:
        await proxy.upstream.aclose()
        await api.aclose()


async def _top(*arguments: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "cli", "top", "--once", *arguments, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"})
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_berth_top_once_against_a_real_proxy_and_simulator(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # nothing here reaches Temporal
    engine = await start_simulator("sim/model")
    _publish(context, "ep-sim", engine.base_url)
    _publish(context, "ep-quiet", engine.base_url)
    token = context.signing.endpoint_token(ALICE, "ep-sim", 600)
    admin = context.signing.api_token(ADMIN)
    sent = 0
    try:
        with serve_api(context, admin, tmp_path, monkeypatch):
            async with _proxy(os.environ["BERTH_API_URL"], admin, context.verifier) as proxy_url:

                async def load() -> None:
                    nonlocal sent
                    async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
                        while True:
                            answer = await client.post(f"{proxy_url}/endpoints/ep-sim/v1/chat/completions", json={
                                "model": "sim/model", "messages": [{"role": "user", "content": "hi"}],
                                "max_tokens": 2})
                            assert answer.status_code == 200, answer.text
                            sent += 1

                loading = asyncio.create_task(load())
                try:
                    code, output = await _top("--proxy-url", proxy_url, "--interval", "1", "-o", "json")
                    table_code, table = await _top("--proxy-url", proxy_url, "--interval", "0.5")
                finally:
                    loading.cancel()
                    await asyncio.gather(loading, return_exceptions=True)
    finally:
        await engine.stop()
    assert code == 0, output
    rows = {row["endpoint"]: row for row in json.loads(output)}
    busy = rows["ep-sim"]
    assert sent > 0 and busy["requests_per_s"] > 0 and busy["error_rate"] == 0.0 and busy["copies"] == 1
    assert 0 < busy["p50_s"] <= busy["p99_s"]
    assert rows["ep-quiet"]["requests_per_s"] == 0 and rows["ep-quiet"]["p99_s"] is None
    assert table_code == 0 and "ep-sim" in table and "REQ/S" in table and "P99 MS" in table, table
