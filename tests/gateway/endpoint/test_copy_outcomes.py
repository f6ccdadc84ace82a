"""The endpoint proxy counts how each copy answered (issue 17: a canary is judged on these): a copy that
answers 500 has its requests counted as errors in the next load report, a healthy one has none, and
each answer's time to its head is summed; the counts start afresh after each report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from berth.contracts import CopyOutcomes
from berth.security import SigningKey, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy
from gateway.endpoint.load_report import MAX_COPIES, LoadCounts, report_once
from tests.gateway.pool_copies import Copy, PoolRoutes

pytestmark = pytest.mark.timeout(60)


class RecordingRoutes(PoolRoutes):
    def __init__(self, copies: list[Copy]) -> None:
        super().__init__(copies, policy="round_robin")
        self.reports: list[tuple[str, int, dict[str, CopyOutcomes]]] = []

    async def report_load(self, endpoint_id: str, requests: int,
                          copies: dict[str, CopyOutcomes] | None = None) -> None:
        self.reports.append((endpoint_id, requests, dict(copies or {})))


async def _ask(proxy: EndpointProxy) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": json.dumps({"model": "m", "messages": []}).encode(),
                "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/endpoints/ep-1/v1/chat/completions", "method": "POST",
             "headers": [(b"content-type", b"application/json")], "query_string": b""}
    await proxy(scope, receive, send)
    return int(sent[0]["status"])


async def test_a_copy_answering_500_is_counted_as_errors_in_the_report(tmp_path: Path) -> None:
    good, bad = await Copy("good").start(), await Copy("bad").start()
    bad.fails = True
    api = RecordingRoutes([good, bad])
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(api, TokenVerifier.from_jwks(key.jwks()),  # type: ignore[arg-type]
                          upstream=UpstreamPool(connect_timeout_s=2))
    try:
        await proxy.refresh()
        statuses = [await _ask(proxy) for _ in range(6)]
        await report_once(api, proxy.load)  # type: ignore[arg-type]
        await report_once(api, proxy.load)  # type: ignore[arg-type]  # nothing since: nothing sent
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        good.close()
        bad.close()
    assert sorted(statuses) == [200] * 3 + [500] * 3
    [(endpoint_id, _admitted, copies)] = api.reports
    assert endpoint_id == "ep-1"
    assert (copies["bad"].requests, copies["bad"].errors, copies["bad"].ttft_count) == (3, 3, 3)
    assert (copies["good"].requests, copies["good"].errors, copies["good"].ttft_count) == (3, 0, 3)
    assert copies["good"].ttft_sum_s > 0


def test_the_counts_are_bounded_per_endpoint() -> None:
    counts = LoadCounts()
    for n in range(MAX_COPIES + 10):
        counts.sent("ep", f"c{n}")
    _arrivals, copies = counts.take()
    assert len(copies["ep"]) == MAX_COPIES and counts.take() == ({}, {})
