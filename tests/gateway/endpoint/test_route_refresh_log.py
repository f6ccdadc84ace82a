"""The endpoint proxy's route refresh against an API that is down: one warning at once, not one per
refresh, and one line when the API answers again."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from berth.contracts import RoutesTable
from berth.errors import BerthError
from berth.failure_log import FailureLog
from gateway.endpoint.endpoint_proxy import EndpointProxy


class FlakyApi:
    """Down (every routes call fails) until `up` is set; counts the calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.up = False

    async def routes(self) -> RoutesTable:
        self.calls += 1
        if not self.up:
            raise BerthError("cannot reach the control plane at http://127.0.0.1:1 (ConnectError)")
        return RoutesTable(endpoints=[])


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_refresh_failures_are_logged_once_then_recovery_once(caplog: pytest.LogCaptureFixture) -> None:
    api = FlakyApi()
    proxy = EndpointProxy(api, verifier=None, refresh_s=0.005)  # type: ignore[arg-type]

    async def until(condition: Any) -> None:
        async with asyncio.timeout(20):
            # Polling, not an event: the condition is the proxy's own loop making progress.
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(0.01)

    failed: list[int] = []

    async def main() -> None:
        refresher = asyncio.create_task(proxy._refresh_forever())
        try:
            await until(lambda: api.calls >= 50)  # ~50 failed refreshes
            assert len(_lines(caplog, "route refresh failed")) == 1
            failed.append(api.calls)  # no await since the last call: every one of them failed
            api.up = True
            await until(lambda: _lines(caplog, "route refresh recovered"))
        finally:
            refresher.cancel()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert len(_lines(caplog, "route refresh failed")) == 1
    (recovered,) = _lines(caplog, "route refresh recovered")
    assert recovered == f"route refresh recovered after {failed[0]} failure(s)"


def test_failure_log_reports_suppressed_count_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailureLog(logging.getLogger("test"), "route refresh", every_s=30, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for second in range(95):  # one failure a second for 95 s
            now[0] = float(second)
            failures.failed("down")
        failures.succeeded()
        failures.failed("down again")  # a new streak: logged at once
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "route refresh failed: down",
        "route refresh failed: down (29 more failure(s) not logged since the last line)",
        "route refresh failed: down (29 more failure(s) not logged since the last line)",
        "route refresh failed: down (29 more failure(s) not logged since the last line)",
        "route refresh recovered after 95 failure(s)",
        "route refresh failed: down again",
    ]
