"""What the endpoint proxy tells the control plane every few seconds about its copies' /metrics (issue 34, `berth
explain routing`): for every copy it routes to, how long ago it last scraped it and last failed to. A copy whose
figures are stale (more than 30 s) or whose last scrape failed is out of the proxy's choice; the control plane
could not say so before, as only the proxy knows. Off the request path: a task of its own, on the proxy's loop."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from berth.api_client import ApiClient
from berth.contracts import CopyScrape
from berth.contracts.internal import MAX_SCRAPE_REPORT
from berth.errors import BerthError
from berth.failure_log import FailureLog
from gateway.edge.routing import Replica

log = logging.getLogger("berth.proxy")

REPORT_EVERY_S = 5.0  # explain reads a report up to 30 s old: a few of them fit in that window


def scrape_ages(replicas: Iterable[Replica], now: float) -> dict[str, CopyScrape]:
    """Each copy's scrape ages on the proxy's monotonic clock (`now` on the same clock), at most MAX_SCRAPE_REPORT."""
    ages: dict[str, CopyScrape] = {}
    for replica in replicas:
        if len(ages) >= MAX_SCRAPE_REPORT:
            break
        metrics = replica.metrics
        ages[replica.copy_id] = CopyScrape(
            scraped_ago_s=None if metrics.scraped_at is None else max(0.0, now - metrics.scraped_at),
            failed_ago_s=None if metrics.failed_at is None else max(0.0, now - metrics.failed_at))
    return ages


async def report_scrapes_forever(api: ApiClient, replicas: Callable[[], Iterable[Replica]],
                                 every_s: float = REPORT_EVERY_S) -> None:
    failures = FailureLog(log, "scrape report")  # the API down: not one line every few seconds
    while True:
        await asyncio.sleep(every_s)
        copies = scrape_ages(replicas(), time.monotonic())
        if not copies:
            continue
        try:
            await api.report_scrapes(copies)
        except BerthError as error:
            failures.failed(error)
        else:
            failures.succeeded()
