"""The endpoint proxy's scrape report (gateway/endpoint/scrape_report.py): every copy it routes to, with how long ago
its /metrics were last scraped and last failed, sent every few seconds off the request path; the API down costs a
rate-limited line, not the proxy."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from berth.contracts import CopyScrape
from berth.errors import UnavailableError
from gateway.edge.routing import Replica, ReplicaMetrics
from gateway.endpoint.scrape_report import report_scrapes_forever, scrape_ages

pytestmark = pytest.mark.timeout(30)


def _replicas() -> list[Replica]:
    return [Replica(copy_id="c0", url="http://a", metrics=ReplicaMetrics(scraped_at=100.0)),
            Replica(copy_id="c1", url="http://b", metrics=ReplicaMetrics(scraped_at=90.0, failed_at=99.5)),
            Replica(copy_id="c2", url="http://c")]


def test_ages_on_the_proxys_clock_and_none_for_what_never_happened() -> None:
    assert scrape_ages(_replicas(), now=101.0) == {
        "c0": CopyScrape(scraped_ago_s=1.0), "c1": CopyScrape(scraped_ago_s=11.0, failed_ago_s=1.5),
        "c2": CopyScrape()}


class _Api:
    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.reports: list[dict[str, CopyScrape]] = []
        self.two_landed = asyncio.Event()

    async def report_scrapes(self, copies: dict[str, CopyScrape]) -> None:
        if self.fail_first:
            self.fail_first -= 1
            raise UnavailableError("the API is down")
        self.reports.append(copies)
        if len(self.reports) >= 2:
            self.two_landed.set()


async def test_reports_keep_coming_after_the_api_failed() -> None:
    api = _Api(fail_first=2)
    task = asyncio.create_task(report_scrapes_forever(api, _replicas, every_s=0.01))  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(api.two_landed.wait(), 10)  # two reports landed after two failures
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert set(api.reports[0]) == {"c0", "c1", "c2"}
