"""CopyActivity: when each pool's copies last did work, read from their own vLLM `/metrics`.

Idleness judged at one front door misses traffic that took another path: the discovering gateway sends
its requests straight to a Proxy=false pool's copies, past the endpoint proxy, so a pool busy through
the gateway read as idle and was scaled to zero under load. A copy's own counters see every request
whatever path it took (gateway, endpoint proxy, LiteLLM), so they are the source that cannot miss one.

A copy is active when its completed-request counter (`vllm:request_success_total`, summed over finish
reasons) moved since the last scrape, or while it has requests running or waiting (a long generation
has not completed yet but is work). A copy's port answers only Berth (rank/berth_rank_guard.py), /metrics
included: the scrape sends the copy's own key and nothing else.
Each scrape is bounded in time and size, so a copy answering slowly or at length costs only itself.
The same scrape keeps each copy's queue, recent TTFT and last good scrape time for the queue/TTFT rules
(control/scaling_decision.py), which judge freshness from that time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx

from gateway.edge.metrics import apply, parse
from gateway.edge.routing import ReplicaMetrics

log = logging.getLogger("berth.autoscaler")

SCRAPE_TIMEOUT_S = 2.0  # whole scrape, connect to last byte: a tick must not wait on a slow copy
# vLLM's /metrics is tens of KiB (more with many LoRA adapters or histograms); far above that is not
# vLLM speaking, and parsing it would only cost the API server's time.
MAX_METRICS_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class CopyTarget:
    """One copy to watch: the pool (endpoint) it serves and its engine's base URL."""

    endpoint_id: str
    copy_id: str
    url: str
    api_key: str = field(default="", repr=False)  # the copy's key: its /metrics answers only Berth


@dataclass
class _Seen:
    url: str
    succeeded: float


class MetricsTooLargeError(Exception):
    """A copy's /metrics went past MAX_METRICS_BYTES."""


class CopyActivity:
    """The last time any copy of each endpoint did work, as its counters tell it."""

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # No cookies, no redirects, no credential but the copy's own key: a copy's answer can lead the API
        # server nowhere else.
        self._client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(SCRAPE_TIMEOUT_S),
                                         follow_redirects=False)
        self._seen: dict[str, _Seen] = {}  # copy id → its URL and counter at the last good scrape
        self._last_active: dict[str, float] = {}  # endpoint id → when a copy last did work
        self._failing: set[str] = set()  # copies whose last scrape failed (logged once per failure run)
        # copy id → its queue, recent TTFT and last good scrape, for the queue/TTFT rules
        self._load: dict[str, ReplicaMetrics] = {}

    def metrics(self, copy_id: str) -> ReplicaMetrics | None:
        """A copy's figures as its scrapes left them (scraped_at on this clock), or None if never scraped."""
        return self._load.get(copy_id)

    def idle_s(self, endpoint_id: str, now: float) -> float:
        """Seconds since a copy of the endpoint did work; infinite when none has been seen working."""
        last = self._last_active.get(endpoint_id)
        return math.inf if last is None else max(0.0, now - last)

    async def observe(self, targets: Iterable[CopyTarget]) -> None:
        """Scrape every target at once; forget copies no longer listed."""
        wanted = list(targets)
        listed = {target.copy_id for target in wanted}
        for copy_id in [c for c in self._seen if c not in listed]:
            del self._seen[copy_id]
        for copy_id in [c for c in self._load if c not in listed]:
            del self._load[copy_id]
        self._failing &= listed
        pools = {target.endpoint_id for target in wanted}
        for endpoint_id in [e for e in self._last_active if e not in pools]:
            del self._last_active[endpoint_id]  # a pool with no copy: nothing to remember (bounded)
        await asyncio.gather(*(self._observe_one(target) for target in wanted))

    async def _observe_one(self, target: CopyTarget) -> None:
        try:
            async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                text = await self._fetch(target.url, target.api_key)
        except (httpx.HTTPError, TimeoutError, MetricsTooLargeError, UnicodeDecodeError) as error:
            if target.copy_id not in self._failing:
                self._failing.add(target.copy_id)
                log.info("activity scrape of copy %s failed (%s): its traffic counts only where a proxy "
                         "saw it", target.copy_id, type(error).__name__)
            return
        self._failing.discard(target.copy_id)
        figures = await asyncio.to_thread(parse, text)
        load = self._load.setdefault(target.copy_id, ReplicaMetrics())
        previous_load = self._seen.get(target.copy_id)
        if previous_load is not None and previous_load.url != target.url:
            load = self._load[target.copy_id] = ReplicaMetrics()  # restarted: its TTFT totals start again
        apply(load, figures, self.clock())
        succeeded = figures.get("succeeded", 0.0)
        busy = figures.get("running", 0.0) + figures.get("waiting", 0.0) > 0
        previous = self._seen.get(target.copy_id)
        self._seen[target.copy_id] = _Seen(url=target.url, succeeded=succeeded)
        # A copy seen for the first time (or at a new URL: restarted) gives a baseline, not activity:
        # its lifetime total says nothing about the last ScaleToZeroAfter seconds.
        moved = previous is not None and previous.url == target.url and succeeded != previous.succeeded
        if moved or busy:
            self._last_active[target.endpoint_id] = self.clock()

    async def _fetch(self, url: str, api_key: str) -> str:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with self._client.stream("GET", f"{url.rstrip('/')}/metrics", headers=headers) as response:
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_METRICS_BYTES:
                    raise MetricsTooLargeError(url)
        return body.decode("utf-8")

    async def aclose(self) -> None:
        await self._client.aclose()
