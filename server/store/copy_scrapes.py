"""How fresh each copy's /metrics figures are at the endpoint proxies (issue 34, `berth explain routing`): each
proxy reports every copy it routes to every few seconds, as ages on its own clock; kept here on the API's clock,
the newest report a copy, so any API process can say whether a copy is out of the proxy's choice for stale or
failed figures. Rows not reported for an hour (a copy gone) are pruned on write."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from berth.contracts.internal import CopyScrape
from server.store.tables import CopyScrapeRow

KEEP_S = 3600.0  # a row unreported this long is a copy no proxy routes to any more


class CopyScrapes:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self.session = session

    def report(self, copies: Mapping[str, CopyScrape], now: float | None = None) -> None:
        """Keep a proxy's report, its ages turned into times on this clock."""
        now = time.time() if now is None else now
        with self.session() as s:
            for copy_id, scrape in copies.items():
                s.merge(CopyScrapeRow(
                    copy_id=copy_id, reported_at=now,
                    scraped_at=None if scrape.scraped_ago_s is None else now - scrape.scraped_ago_s,
                    failed_at=None if scrape.failed_ago_s is None else now - scrape.failed_ago_s))
            s.execute(delete(CopyScrapeRow).where(CopyScrapeRow.reported_at < now - KEEP_S))

    def of(self, copy_ids: Iterable[str], now: float | None = None,
           within_s: float = 30.0) -> dict[str, tuple[float | None, float | None]]:
        """(last good scrape, last failed one) of each copy a proxy reported within `within_s`; a copy not
        reported that recently is left out (its freshness is not known here)."""
        now = time.time() if now is None else now
        wanted = list(copy_ids)
        if not wanted:
            return {}
        with self.session() as s:
            rows = s.scalars(select(CopyScrapeRow).where(CopyScrapeRow.copy_id.in_(wanted),
                                                         CopyScrapeRow.reported_at >= now - within_s)).all()
            return {row.copy_id: (row.scraped_at, row.failed_at) for row in rows}
