"""What the endpoint proxy tells the control plane each second, per endpoint: the requests it admitted (the
autoscaler's rate) and how each copy answered the ones sent to it (a canary's health, issue 17)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from berth.api_client import ApiClient
from berth.contracts import CopyOutcomes
from berth.errors import BerthError

log = logging.getLogger("berth.proxy")

MAX_COPIES = 256  # per endpoint and report: a pool is far smaller; this only bounds a runaway


@dataclass
class Outcome:
    """One copy's counts since the last report: plain ints, bumped on the hot path without a lock (the
    proxy is one event loop)."""

    requests: int = 0
    errors: int = 0  # answered 5xx, or no answer (connect or read failure before the response's head)
    ttft_sum_s: float = 0.0  # from sending upstream to the response's head (status and headers)
    ttft_count: int = 0


class LoadCounts:
    def __init__(self) -> None:
        self.arrivals: dict[str, int] = {}  # requests admitted per pool endpoint
        self.copies: dict[str, dict[str, Outcome]] = {}  # endpoint → copy → its answers

    def admitted(self, endpoint_id: str) -> None:
        self.arrivals[endpoint_id] = self.arrivals.get(endpoint_id, 0) + 1

    def copy(self, endpoint_id: str, copy_id: str) -> Outcome | None:
        """The copy's counters (None past the bound: that request goes uncounted)."""
        copies = self.copies.setdefault(endpoint_id, {})
        outcome = copies.get(copy_id)
        if outcome is None:
            if len(copies) >= MAX_COPIES:
                return None
            outcome = copies[copy_id] = Outcome()
        return outcome

    def sent(self, endpoint_id: str, copy_id: str) -> Outcome | None:
        outcome = self.copy(endpoint_id, copy_id)
        if outcome is not None:
            outcome.requests += 1
        return outcome

    def take(self) -> tuple[dict[str, int], dict[str, dict[str, Outcome]]]:
        taken = self.arrivals, self.copies
        self.arrivals, self.copies = {}, {}
        return taken


def answered(outcome: Outcome | None, status: int, seconds: float) -> None:
    if outcome is None:
        return
    outcome.ttft_sum_s += seconds
    outcome.ttft_count += 1
    if status >= 500:
        outcome.errors += 1


def failed(outcome: Outcome | None) -> None:
    if outcome is not None:
        outcome.errors += 1


async def report_once(api: ApiClient, counts: LoadCounts) -> None:
    arrivals, copies = counts.take()
    for endpoint_id in arrivals.keys() | copies.keys():
        outcomes = {copy_id: CopyOutcomes(requests=o.requests, errors=o.errors, ttft_sum_s=o.ttft_sum_s,
                                          ttft_count=o.ttft_count)
                    for copy_id, o in copies.get(endpoint_id, {}).items()}
        try:
            await api.report_load(endpoint_id, arrivals.get(endpoint_id, 0), outcomes)
        except BerthError as error:
            log.warning("load report for %s failed: %s", endpoint_id, error)


async def report_forever(api: ApiClient, counts: LoadCounts, every_s: float = 1.0) -> None:
    """Every second, tell the control plane what each endpoint admitted and how its copies answered."""
    while True:
        await asyncio.sleep(every_s)
        await report_once(api, counts)
