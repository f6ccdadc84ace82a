"""A real Prometheus scrapes a simulated stack's endpoint proxy under load: the request counter and the
latency histogram it reports through its HTTP API match the requests sent, refusals carry their reason, and
no series names a user or a token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.prometheus_server import PrometheusServer
from tests.support import RunningStack, free_port_base, wait_for

pytestmark = pytest.mark.prometheus
CHAT = {"model": "openai/gpt-oss-20b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
SENT = 40


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    running = RunningStack(state_dir=Path(tmp_path_factory.mktemp("prometheus-stack")), port_base=free_port_base(),
                           nodes=1, simulate_gpus="2x80GB")
    running.start()
    try:
        yield running
    finally:
        running.stop()


async def _load(url: str, token: str, count: int) -> list[int]:
    async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
        limit = asyncio.Semaphore(8)

        async def one() -> int:
            async with limit:
                return (await client.post(f"{url}/v1/chat/completions", json=CHAT)).status_code

        return list(await asyncio.gather(*(one() for _ in range(count))))


def test_prometheus_sees_what_the_proxy_served(stack: RunningStack, tmp_path: Path) -> None:
    workflow_id = stack.start_entry("GPT-OSS 20B", "Proxy=false")
    endpoint = stack.endpoint(workflow_id)
    token = stack.token_for(endpoint["id"])
    proxy = urlsplit(stack.info["proxy_url"]).netloc
    prometheus = PrometheusServer(tmp_path / "prometheus", {"endpoint-proxy": proxy}).start()
    try:
        statuses = asyncio.run(_load(endpoint["url"], token, SENT))
        assert statuses == [200] * SENT
        assert httpx.post(f"{endpoint['url']}/v1/chat/completions", json=CHAT, timeout=30).status_code == 401
        served = f'berth_proxy_requests_total{{endpoint="{endpoint["id"]}",code="200"}}'

        def counted() -> bool:
            result = prometheus.query(served)
            return bool(result) and float(result[0]["value"][1]) == SENT

        wait_for(counted, timeout=60, what="Prometheus to scrape the proxy's request counter")
        histogram = prometheus.query(f'berth_proxy_request_duration_seconds_count{{endpoint="{endpoint["id"]}"}}')
        assert float(histogram[0]["value"][1]) == SENT + 1  # the refused one took time too
        refusals = prometheus.query(f'berth_proxy_refusals_total{{endpoint="{endpoint["id"]}",reason="auth"}}')
        assert float(refusals[0]["value"][1]) == 1
        p99 = prometheus.query("histogram_quantile(0.99, sum by (le) (berth_proxy_added_latency_seconds_bucket))")
        assert 0 <= float(p99[0]["value"][1]) < 0.25  # the proxy's own share, far below the copy's
        labels = {name for series in prometheus.query('{__name__=~"berth_proxy_.*"}') for name in series["metric"]}
        assert labels <= {"__name__", "endpoint", "code", "reason", "le", "instance", "job"}, labels
    finally:
        prometheus.stop()
