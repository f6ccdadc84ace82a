"""Requests held at the endpoint proxy for a pool with no routable copy: the pool is woken (a pool at zero
starts a copy), and each request waits for a copy until its deadline (120 s, or less with
`x-request-timeout`), at most 100 per endpoint. Concurrent first requests share one wake call."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from berth.errors import BerthError
from gateway.edge import asgi
from gateway.edge.routing import Replica
from gateway.edge.upstream import Send
from gateway.endpoint import error_answers
from gateway.endpoint.route_table import Route

if TYPE_CHECKING:
    from berth.api_client import ApiClient

log = logging.getLogger("berth.proxy")

HOLD_TIMEOUT_S = 120.0
# A Proxy=true pool whose copies serve while its LiteLLM is being restarted: held this long at most, then
# the documented "being restarted" 503 (BERTH_PROXY_FRONT_HOLD_S). As long as the wake's hold by default: a
# LiteLLM restart takes 20-45 s on a busy machine, and a request held through it is served where a shorter
# bound would fail it; an operator whose clients time out sooner sets it shorter (issue 29).
FRONT_HOLD_S = HOLD_TIMEOUT_S
LITELLM_SYNC_SETTLE_S = 1.5
AWAKE_ANSWER_TTL_S = 2.0  # how long a LiteLLM-fronted pool's "not asleep" answer is trusted
HELD_POLL_S = 0.05  # while requests are held: how often to look for a routable copy (a routes read)
MAX_HELD_PER_ENDPOINT = 100
WAKE_EVERY_S = 5.0  # re-send the wake-up while requests wait (a lost signal must not strand them)


class Holds:
    """The held requests and wake calls of one endpoint proxy. `current(route)` is the routing table's
    newest Route for that endpoint (a refresh replaces Route objects while requests wait);
    `look_again(age_s)` refreshes the table unless it is younger than `age_s`."""

    def __init__(self, api: ApiClient, current: Callable[[Route], Route],
                 look_again: Callable[[float], Awaitable[None]], on_woken: Callable[[str], None] | None = None,
                 ) -> None:
        self.api = api
        self._on_woken = on_woken  # told each endpoint id this proxy woke (its wake-ups counter)
        self._current, self._look_again = current, look_again
        self.timeout_s = HOLD_TIMEOUT_S
        self.front_hold_s = FRONT_HOLD_S
        self.max_held = MAX_HELD_PER_ENDPOINT
        self.held: dict[str, int] = {}  # per endpoint id, not per Route (see `current`)
        self._last_wake: dict[str, float] = {}
        self._woken_at: dict[str, float] = {}  # when this proxy woke a LiteLLM-fronted pool from zero
        self._waking: dict[str, asyncio.Future[bool]] = {}
        self._awake_until: dict[str, float] = {}  # a pool that said "not asleep", until when to believe it

    async def hold(self, route: Route, send: Send, headers: list[tuple[bytes, bytes]],
                   session_id: str | None, front_restarting: bool = False) -> Replica | None:
        """Wake the pool, then wait for a routable copy until the deadline; None once answered (429: too
        many waiting; 503: the deadline passed). `front_restarting`: the copies serve and the pool's LiteLLM
        is being restarted: held `FRONT_HOLD_S` at most, and its 503 says so."""
        if self.held.get(route.id, 0) >= self.max_held:
            await asgi.json_answer(send, 429, b'{"error":{"message":"Too many requests are waiting for this '
                                      b'endpoint to wake up; retry later.","type":"too_many_requests","code":429}}',
                                      [(b"retry-after", b"5")])
            return None
        deadline_s = asgi.deadline(min(self.timeout_s, self.front_hold_s) if front_restarting else self.timeout_s,
                                      headers)
        started = time.monotonic()
        self.held[route.id] = self.held.get(route.id, 0) + 1
        try:
            while True:
                route = self._current(route)
                target = route.target(session_id)
                if target is not None:
                    self._woken_at.pop(route.id, None)
                    if route.fronts_pool and route.litellm_routed is None:
                        # LiteLLM has not reported which copies it routes to (an older hook, or a
                        # control plane restarted since): give its sync poll time to catch up, or the
                        # first request after a wake gets its "Invalid model name".
                        await asyncio.sleep(LITELLM_SYNC_SETTLE_S)
                    return target
                now = time.monotonic()
                if now - self._last_wake.get(route.id, 0.0) >= WAKE_EVERY_S:
                    self._last_wake[route.id] = now
                    asyncio.create_task(self.wake_once(route))
                if now - started >= deadline_s:
                    break
                # Tight while someone waits: every 100 ms of polling is 100 ms on the first reply.
                await asyncio.sleep(min(HELD_POLL_S, max(0.0, deadline_s - (now - started))))
                await self._look_again(HELD_POLL_S)
        finally:
            self.held[route.id] -= 1
        if front_restarting:
            await error_answers.front_restarting(send)
            return None
        waited = f"{time.monotonic() - started:.0f}"
        await asgi.json_answer(send, 503, b'{"error":{"message":"No replica of this endpoint became ready '
                                  b'within ' + waited.encode() + b' s; it is starting, retry shortly.",'
                                  b'"type":"service_unavailable","code":503}}', [(b"retry-after", b"10")])
        return None

    async def when_none_routable(self, route: Route, send: Send, headers: list[tuple[bytes, bytes]],
                                 session_id: str | None, served: set[str]) -> Replica | None:
        """A request with no routable copy: refused (a service), sent to a pool's LiteLLM (copies are
        already wanted), or held (`served`: the pools this proxy has seen serving)."""
        if not route.wakeable:
            await asgi.json_answer(send, 503, b'{"error":{"message":"No replica of this endpoint is ready yet; '
                                         b'retry shortly.","type":"service_unavailable","code":503}}')
            return None
        if (route.fronts_pool and route.service_url and route.id not in served
                and not await self.asleep(route)):
            # Copies are already wanted (the pool's first start, or waiting for capacity), not asleep:
            # LiteLLM answers as the documents say ("Invalid model name", an empty /v1/models).
            return Replica(copy_id="service", url=route.service_url)
        # Copies serve but the pool's LiteLLM is down (being restarted): a short hold, then its 503.
        restarting = route.fronts_pool and not route.service_url and bool(route.ready_copies())
        return await self.hold(route, send, headers, session_id, front_restarting=restarting)

    async def asleep(self, route: Route) -> bool:
        """Whether a request to this LiteLLM-fronted pool with no ready copy should be held: the pool was
        at zero (this call wakes it) or a wake from here is still under way. Concurrent first requests
        share one wake call, so none of them sees the pool "already waking" and slips past the hold."""
        now = time.monotonic()
        woken_at = self._woken_at.get(route.id)
        if woken_at is not None and now - woken_at < self.timeout_s:
            return True
        if now < self._awake_until.get(route.id, 0.0):
            return False  # asked a moment ago: copies are already wanted (one API call per pool)
        pending = self._waking.get(route.id)
        if pending is None:
            pending = self._waking[route.id] = asyncio.ensure_future(self.wake_once(route))
            pending.add_done_callback(lambda _: self._waking.pop(route.id, None))
        return await asyncio.shield(pending)

    async def wake_once(self, route: Route) -> bool:
        try:
            reply = await self.api.wake_endpoint(route.id, "a request arrived at the endpoint proxy")
        except BerthError as error:
            log.warning("waking endpoint %s failed: %s", route.id, error)
            return True  # hold: the hold loop keeps trying, and answers 503 at the deadline
        self._last_wake[route.id] = time.monotonic()
        if reply.woken:
            self._woken_at[route.id] = time.monotonic()
            if self._on_woken is not None:
                self._on_woken(route.id)
            log.info("woke endpoint %s (workflow %s)", route.id, route.workflow_id)
            return True
        self._awake_until[route.id] = time.monotonic() + AWAKE_ANSWER_TTL_S
        return False
