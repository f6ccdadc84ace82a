"""Engine liveness: a leader rank's activity probes its own engine's `/health` and calls it hung after
N failed probes in a row (a Kubernetes livenessProbe's failureThreshold), so a process that is alive but
answers nothing (deadlocked, SIGSTOPped, wedged on a GPU) fails its copy instead of serving on forever."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from berth.tls_client import url_context
from workflows.payloads import HealthCheck


@dataclass
class FailureStreak:
    """Consecutive failed probes; a success starts the count again."""

    limit: int
    count: int = 0
    last: str = ""

    def record(self, failure: str | None) -> bool:
        """Note one probe (`failure` None: it passed); True once `limit` failed in a row."""
        if failure is None:
            self.count, self.last = 0, ""
            return False
        self.count += 1
        self.last = failure
        return self.count >= self.limit


async def probe(client: httpx.AsyncClient, check: HealthCheck) -> str | None:
    """One probe of `/health`: None when it answered 200, else what went wrong, in words."""
    try:
        response = await client.get(f"{check.url}/health", timeout=check.timeout_s)
    except httpx.TimeoutException:
        return f"timeout after {check.timeout_s:g} s"
    except httpx.HTTPError as error:
        return f"{type(error).__name__}"
    return None if response.status_code == 200 else f"answered {response.status_code}"


async def until_hung(check: HealthCheck, on_routable: Callable[[bool], Awaitable[None]] | None = None,
                     transport: httpx.AsyncBaseTransport | None = None) -> str:
    """Probe every `interval_s` and return why the engine is hung; never returns while it stays healthy.

    As a readiness probe, the first failed probe calls `on_routable(False)` (no new requests to an engine
    that may be hung) and the next passing one `on_routable(True)`; as a liveness probe, `failures_to_fail`
    in a row end it. Probing starts only after the first answer: until then the engine is still starting,
    and its start-up is wait_ready's business (with the engine's own start timeout)."""
    streak = FailureStreak(check.failures_to_fail)
    answered = False
    routable = True
    # An http engine's probe loads no CA store (30 ms of CPU each time it starts: berth/tls_client.py).
    async with httpx.AsyncClient(transport=transport, verify=url_context(check.url, None)) as client:
        while True:
            await asyncio.sleep(check.interval_s)
            failure = await probe(client, check)
            answered = answered or failure is None
            if not answered:
                continue
            if streak.record(failure):
                return f"/health failed {streak.count} times in a row ({streak.last})"
            if (failure is None) != routable and on_routable is not None:
                routable = failure is None
                await on_routable(routable)
