"""What the endpoint proxy does when its first attempt reached no upstream: a pool request goes once to
another copy; a request to the endpoint's LiteLLM proxy waits while that proxy is started again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.edge.routing import Replica
from gateway.edge.upstream import Answer, Upstream, UpstreamError

Headers = list[tuple[bytes, bytes]]
# How often a held request tries the restarting LiteLLM again: a refused connect costs ~0.1 ms, and
# every 250 ms of polling can be 250 ms on the reply once it is back.
SERVICE_RETRY_EVERY_S = 0.25


async def await_service(upstream: Upstream, service_url: Callable[[], str | None], method: str, path: str,
                        headers: Callable[[], Headers], body: bytes, deadline_s: float,
                        log: logging.Logger, replayable: bool = False) -> tuple[Replica, Answer] | None:
    """Send the request again until the endpoint's LiteLLM answers or `deadline_s` passes. LiteLLM
    refusing connections is down and being started again by its node (seconds; the chaos soak saw every
    such request fail with 502 before): nothing reached it, so sending it again is safe, streamed or not.
    A request that reached LiteLLM and broke it (nothing came back) is sent again once in all: this call's
    first send when the caller's attempt broke (`replayable` False), one more when `replayable` (the
    caller's attempt was refused). Never more: a request that breaks LiteLLM may be what kills it, and must
    not take it down again and again for every user of the endpoint.
    `service_url()` and `headers()` are read at each send: a restarted LiteLLM may come back elsewhere, and a
    caller assertion must not expire while the request waits."""
    started = time.monotonic()
    replays_left = 1 if replayable else 0
    while time.monotonic() - started < deadline_s:
        await asyncio.sleep(SERVICE_RETRY_EVERY_S)
        url = service_url()
        if url is None:
            continue
        try:
            return Replica(copy_id="service", url=url), await upstream.request(method, url + path, headers(), body)
        except UpstreamError as error:
            if not error.refused:
                if replays_left == 0:
                    log.warning("LiteLLM at %s broke the held request: %s", url, error)
                    return None
                replays_left -= 1
    log.warning("LiteLLM did not come back within %.0f s", deadline_s)
    return None


async def other_copy(upstream: Upstream, other: Replica | None, method: str, path: str, headers: Headers,
                     body: bytes, log: logging.Logger) -> tuple[Replica, Answer] | None:
    """One more try on another copy of the pool (the caller chose it), or None."""
    if other is None:
        return None
    other.in_flight += 1
    try:
        response = await upstream.request(method, other.url + path, headers, body)
    except UpstreamError as error:
        failed_at = other.metrics.failed_at = time.monotonic()
        other.failures.add(failed_at)
        log.warning("retry on %s failed too: %s", other.url, error)
        return None
    finally:
        other.in_flight -= 1
    if response.status >= 500:
        other.failures.add(time.monotonic())
    return other, response
