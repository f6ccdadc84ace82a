"""The discovering gateway's /health says how far discovery has got (completed rounds, when the last one
started) and when its last scrape of the copies started, and nothing else, before the master key: what a
caller waits on instead of sleeping."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from berth.api_client import ApiClient
from berth.errors import BerthError
from gateway.edge.master_key import MasterKeyGate
from gateway.edge.metrics import MetricsScraper
from gateway.models.model_gateway import ModelGateway


async def test_health_counts_completed_discovery_rounds_without_the_master_key() -> None:
    failing = False

    def api(request: httpx.Request) -> httpx.Response:
        if failing:
            return httpx.Response(503, json={"detail": "down"})
        answers = {"/v1/endpoints": [], "/v1/internal/replica-keys": {"keys": {}}}
        return httpx.Response(200, json=answers[request.url.path])

    client = ApiClient("http://api.test", "owner-token", transport=httpx.MockTransport(api))
    gateway = ModelGateway(client, gate=MasterKeyGate("sk-master-0123456789abcdef", "ep-gateway", client.jwks))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as http:

        async def discovery() -> dict[str, object]:
            reply = await http.get("/health")  # no key: the answer holds counts and times only
            assert reply.status_code == 200
            assert set(reply.json()) == {"status", "discovery", "scrape"}
            return reply.json()["discovery"]  # type: ignore[no-any-return]

        assert await discovery() == {"rounds": 0, "last_round_started_at": None}
        before = time.time()
        await gateway.refresh()
        first = await discovery()
        assert first["rounds"] == 1
        assert isinstance(first["last_round_started_at"], float)
        assert before <= first["last_round_started_at"] <= time.time()
        await gateway.refresh(older_than_s=3600)  # skipped: a round finished just now
        assert await discovery() == first
        failing = True
        with pytest.raises(BerthError):
            await gateway.refresh()
        assert await discovery() == first
        failing = False
        await gateway.refresh()
        second = await discovery()
        assert second["rounds"] == 2
        assert second["last_round_started_at"] >= first["last_round_started_at"]  # type: ignore[operator]
    await client.aclose()


async def test_the_scrape_says_when_its_last_completed_round_started() -> None:
    scraper = MetricsScraper(lambda: [], interval_s=0.05)
    assert scraper.last_round_started_at is None
    before = time.time()
    scraper.start()
    try:
        async with asyncio.timeout(5):
            while scraper.last_round_started_at is None:  # noqa: ASYNC110 — a field, not an event
                await asyncio.sleep(0.01)
        assert before <= scraper.last_round_started_at <= time.time()
    finally:
        await scraper.aclose()
