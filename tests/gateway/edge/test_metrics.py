"""Scraping vLLM /metrics: the parser, TTFT windows, a failed scrape, and a real simulator process."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx

from gateway.edge import metrics as scraping
from gateway.edge.routing import Replica, ReplicaMetrics
from rank import GUARD_DIR, GUARD_MIDDLEWARE
from simulator.testing import start_simulator

ROOT = Path(__file__).resolve().parents[3]

SAMPLE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.375
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 8.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
"""


def test_parse_sums_engines() -> None:
    figures = scraping.parse(SAMPLE)
    assert figures == {"running": 4.0, "waiting": 2.0, "kv_cache_usage": 0.375,
                       "ttft_sum": 4.0, "ttft_count": 8.0}


def test_ttft_is_the_mean_since_the_last_scrape() -> None:
    metrics = ReplicaMetrics()
    scraping.apply(metrics, {"ttft_sum": 4.0, "ttft_count": 8.0}, now=1.0)
    assert metrics.recent_ttft_s == 0.5
    scraping.apply(metrics, {"ttft_sum": 6.0, "ttft_count": 9.0}, now=2.0)
    assert metrics.recent_ttft_s == 2.0  # one new request, 2 s
    scraping.apply(metrics, {"ttft_sum": 6.0, "ttft_count": 9.0}, now=3.0)
    assert metrics.recent_ttft_s == 2.0  # nothing new: keep the last window


def test_failed_scrape_marks_the_replica_failed() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async def scenario() -> ReplicaMetrics:
        metrics = ReplicaMetrics(scraped_at=0.5)
        scraper = scraping.MetricsScraper(lambda: [Replica("copy-a", "http://replica", metrics=metrics)],
                                          transport=httpx.MockTransport(refuse), clock=lambda: 1.0)
        await scraper.scrape_all()
        await scraper.aclose()
        return metrics

    metrics = asyncio.run(scenario())
    assert metrics.failed_at == 1.0 and not metrics.fresh(1.0)


def test_scrapes_a_real_simulator_under_load() -> None:
    async def scenario() -> ReplicaMetrics:
        # Guarded as a rank is: its /metrics answers only a caller with the copy's key.
        sim = await start_simulator("sim/model", ["--middleware", GUARD_MIDDLEWARE], env={
            "BERTH_SIM_TOKENS_PER_SECOND": "20", "BERTH_SIM_MAX_NUM_SEQS": "2", "VLLM_API_KEY": "copy-key",
            "PYTHONPATH": os.pathsep.join((str(GUARD_DIR), str(ROOT)))})
        replica = Replica("copy-a", sim.base_url, api_key="copy-key")
        metrics = replica.metrics
        scraper = scraping.MetricsScraper(lambda: [replica])
        try:
            assert not await scraping.MetricsScraper(lambda: []).scrape_now(Replica("copy-a", sim.base_url))
            async with httpx.AsyncClient(timeout=30, headers={"Authorization": "Bearer copy-key"}) as client:
                body = {"model": "sim/model", "prompt": "hi", "max_tokens": 40, "ignore_eos": True}
                requests = [asyncio.create_task(client.post(f"{sim.base_url}/v1/completions", json=body))
                            for _ in range(5)]
                async with asyncio.timeout(20):  # until the simulator has admitted all five
                    while not (await scraper.scrape_now(replica)  # noqa: ASYNC110 — polling
                               and metrics.running + metrics.waiting == 5):
                        await asyncio.sleep(0.05)
                await asyncio.gather(*requests)
        finally:
            await scraper.aclose()
            await sim.stop()
        return metrics

    metrics = asyncio.run(scenario())
    assert metrics.running == 2 and metrics.waiting == 3
    assert metrics.kv_cache_usage == 1.0 and metrics.scraped_at is not None
