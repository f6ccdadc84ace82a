"""MetricsScraper: read each replica's vLLM /metrics every few seconds into the routing figures (with the
copy's key: a copy's port answers only Berth, /metrics included — rank/berth_rank_guard.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

import httpx

from gateway.edge.routing import Replica, ReplicaMetrics

log = logging.getLogger("berth.metrics")

SCRAPE_INTERVAL_S = 2.0
SCRAPE_TIMEOUT_S = 2.0
WANTED = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",  # older vLLM releases' name for the same figure
    "vllm:time_to_first_token_seconds_sum": "ttft_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    # Completed requests (every finish reason): the API server's idleness judgement reads it.
    "vllm:request_success_total": "succeeded",
    "vllm:generation_tokens_total": "generation_tokens",  # highest_throughput's rate
    # A GPU's draw in watts, DCGM's name (summed: a copy's GPUs together). vLLM reports none; energy_optimized
    # weighs it only where something adds it to a copy's /metrics.
    "DCGM_FI_DEV_POWER_USAGE": "power_watts",
}


def parse(text: str) -> dict[str, float]:
    """The wanted vLLM figures from Prometheus text, each summed over its label sets (engines, models)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end < 0:
            continue
        field_name = WANTED.get(line[:name_end])
        if field_name is None:
            continue
        try:
            value = float(line.rsplit("}", 1)[-1].split()[0])
        except (ValueError, IndexError):
            continue
        values[field_name] = values.get(field_name, 0.0) + value
    return values


def apply(metrics: ReplicaMetrics, figures: dict[str, float], now: float) -> None:
    """Fold one successful scrape into a replica's figures (TTFT becomes the mean since the last scrape, generation
    a rate since then)."""
    ttft_sum, ttft_count = figures.get("ttft_sum", 0.0), figures.get("ttft_count", 0.0)
    if metrics.scraped_at is not None and ttft_count > metrics.ttft_count:
        metrics.recent_ttft_s = (ttft_sum - metrics.ttft_sum) / (ttft_count - metrics.ttft_count)
    elif metrics.recent_ttft_s is None and ttft_count > 0:
        metrics.recent_ttft_s = ttft_sum / ttft_count
    metrics.ttft_sum, metrics.ttft_count = ttft_sum, ttft_count
    running = figures.get("running", 0.0)
    generated = figures.get("generation_tokens", 0.0)
    if metrics.scraped_at is not None and now > metrics.scraped_at and generated > metrics.generation_tokens:
        # Per running request (the mean of the two scrapes' counts, at least one): a copy running a big batch
        # generates more in all without being faster for the next request.
        sequences = max(1.0, (metrics.running + running) / 2)
        metrics.tokens_per_s = (generated - metrics.generation_tokens) / (now - metrics.scraped_at) / sequences
    metrics.generation_tokens = generated  # a restarted engine's counter starts again below: no rate that round
    metrics.power_watts = figures.get("power_watts")
    metrics.running = running
    metrics.waiting = figures.get("waiting", 0.0)
    metrics.kv_cache_usage = figures.get("kv_cache_usage", 0.0)
    metrics.scraped_at = now


class MetricsScraper:
    """Scrapes every URL `targets()` names, every `interval_s`; `scrape_now` serves new replicas at once."""

    def __init__(self, targets: Callable[[], Iterable[Replica]],
                 interval_s: float = SCRAPE_INTERVAL_S, transport: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self.clock = clock
        self._client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(SCRAPE_TIMEOUT_S))
        self._task: asyncio.Task[None] | None = None
        self.last_round_started_at: float | None = None  # wall clock, of the last completed round

    async def scrape_now(self, replica: Replica) -> bool:
        url, metrics = replica.url, replica.metrics
        try:
            response = await self._client.get(f"{url}/metrics", headers=replica.authorization())
            response.raise_for_status()
        except httpx.HTTPError as error:
            metrics.failed_at = self.clock()
            log.info("scrape of %s failed: %s", url, type(error).__name__)
            return False
        apply(metrics, parse(response.text), self.clock())
        return True

    async def scrape_all(self) -> None:
        await asyncio.gather(*(self.scrape_now(replica) for replica in self.targets()))

    async def _run(self) -> None:
        while True:
            started, started_at = self.clock(), time.time()
            await self.scrape_all()
            self.last_round_started_at = started_at
            await asyncio.sleep(max(0.05, self.interval_s - (self.clock() - started)))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.aclose()
