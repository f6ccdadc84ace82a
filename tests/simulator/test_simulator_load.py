"""Queueing beyond max-num-seqs, the metrics that show it, and streams that really stream."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from simulator.testing import LaunchSimulator

MODEL = "sim/queued"
LABELS = {"model_name": MODEL, "engine": "0"}


async def _scrape(http: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **extra: str) -> float:
    return samples[(name, tuple(sorted({**LABELS, **extra}.items())))]


async def test_requests_beyond_max_num_seqs_wait_and_metrics_count_them(
    launch_simulator: LaunchSimulator,
) -> None:
    simulator = await launch_simulator(
        MODEL, ["--max-num-seqs", "2"], env={"BERTH_SIM_TOKENS_PER_SECOND": "50"}
    )
    async with (
        httpx.AsyncClient(base_url=simulator.base_url) as http,
        openai.AsyncOpenAI(base_url=simulator.api_url, api_key="x", max_retries=0) as client,
    ):
        before = await _scrape(http)
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
            assert _value(before, name) == 0
        assert _value(before, "vllm:request_success_total", finished_reason="length") == 0

        async def one_request() -> str | None:
            # ignore_eos: exactly max_tokens tokens, 0.16 s each at 50 tokens/s.
            reply = await client.completions.create(
                model=MODEL, prompt="load test prompt", max_tokens=8, extra_body={"ignore_eos": True}
            )
            return reply.choices[0].finish_reason

        requests = [asyncio.create_task(one_request()) for _ in range(6)]
        peak_waiting = peak_running = peak_usage = 0.0
        while not all(request.done() for request in requests):
            during = await _scrape(http)
            peak_waiting = max(peak_waiting, _value(during, "vllm:num_requests_waiting"))
            peak_running = max(peak_running, _value(during, "vllm:num_requests_running"))
            peak_usage = max(peak_usage, _value(during, "vllm:kv_cache_usage_perc"))
            await asyncio.sleep(0.03)
        assert await asyncio.gather(*requests) == ["length"] * 6
        assert peak_waiting > 0 and peak_running == 2 and peak_usage == 1.0

        after = await _scrape(http)
        assert _value(after, "vllm:num_requests_waiting") == _value(after, "vllm:num_requests_running") == 0
        assert _value(after, "vllm:request_success_total", finished_reason="length") == 6
        assert _value(after, "vllm:generation_tokens_total") == 48
        assert _value(after, "vllm:prompt_tokens_total") == 18
        assert _value(after, "vllm:time_to_first_token_seconds_count") == 6
        assert _value(after, "vllm:e2e_request_latency_seconds_count") == 6
        # Two waves queued behind the first: the slowest request waited at least 2 x 8 tokens / 50 per s.
        assert _value(after, "vllm:e2e_request_latency_seconds_bucket", le="0.3") < 6


async def test_streams_arrive_token_by_token(launch_simulator: LaunchSimulator) -> None:
    simulator = await launch_simulator(
        MODEL,
        env={"BERTH_SIM_TOKENS_PER_SECOND": "10", "BERTH_SIM_TTFT": "0.2", "BERTH_SIM_REPLY": "a b c d e"},
    )
    async with openai.AsyncOpenAI(base_url=simulator.api_url, api_key="x", max_retries=0) as client:
        sent = time.monotonic()
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        arrivals = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.monotonic() - sent)
    assert len(arrivals) == 5
    # TTFT 0.2 s plus one token; then 100 ms between tokens, not all at once at the end. (At 10 tokens/s the
    # 0.4 s spread stays visible when a busy machine, e.g. parallel test workers, delays a chunk or two.)
    assert arrivals[0] >= 0.2
    assert arrivals[-1] - arrivals[0] >= 0.25


async def test_a_client_that_hangs_up_frees_its_slot(launch_simulator: LaunchSimulator) -> None:
    simulator = await launch_simulator(
        MODEL, ["--max-num-seqs", "1"], env={"BERTH_SIM_TOKENS_PER_SECOND": "20"}
    )
    async with httpx.AsyncClient(base_url=simulator.base_url, timeout=5) as http:
        body = {"model": MODEL, "prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True}
        async with http.stream("POST", "/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                assert line.startswith("data: ")
                break  # hang up after the first token
        # The only slot comes back: a second request completes instead of waiting 2.5 s.
        reply = await http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert reply.json()["choices"][0]["text"] == "Simulated reply"
        metrics = await _scrape(http)
    assert _value(metrics, "vllm:request_success_total", finished_reason="abort") == 1
