"""Retry step: what the first attempt's outcome calls for. No answer: wait for the endpoint's restarting LiteLLM,
or send a replayable pool request once to another copy (gateway/endpoint/retry.py), else 502 / 503
(gateway/endpoint/error_answers.py). An answer from LiteLLM saying it lost the completion with a dying copy, or that
it has no copy of the model just as the pool lost the one it routed to: sent once more when the pool's copies have
changed (gateway/endpoint/litellm_replay.py)."""

from __future__ import annotations

import asyncio
import logging

from gateway.edge.asgi import deadline
from gateway.edge.routing import Replica
from gateway.edge.upstream import Answer, UpstreamError
from gateway.endpoint import litellm_replay, retry
from gateway.endpoint.error_answers import upstream_failed
from gateway.endpoint.hold import HELD_POLL_S
from gateway.endpoint.load_report import answered
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.route_table import Route
from gateway.endpoint.steps.base import Step
from gateway.endpoint.upstream_headers import to_target

log = logging.getLogger("berth.proxy")


class Retry(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        route, target, error = request.route, request.target, request.failure
        assert route is not None and target is not None
        if error is not None:
            second = await self._second_try(request, route, target, error)
            if second is None:
                await upstream_failed(request.send, route, target)
                return False
            target.in_flight -= 1
            self.proxy.metrics.retried(route.id)
            target, request.response = second
            answered(self.proxy.sent(route, target), request.response.status, 0.0)  # its time is the retry's
            target.in_flight += 1
            request.target = target
        elif request.retriable and route.fronts_pool and target.copy_id == "service":
            assert request.response is not None
            answer = await litellm_replay.read_error(request.response)
            if answer is not None:
                replayed = await self._replay_lost(request, answer, route, target)
                if replayed is None:
                    await answer.send(request.send)
                    return False
                request.response = replayed
        return True

    async def _replay_lost(self, request: ProxyRequest, answer: litellm_replay.BufferedAnswer, route: Route,
                           target: Replica) -> Answer | None:
        """LiteLLM lost this completion with a dying copy: send it once more when its routed copies have
        changed; None when it is not such a loss (or no copy came back), and the answer is relayed."""
        body, proxy = request.upstream_body, self.proxy
        if not isinstance(body, bytes) or not (answer.lost_with_copy() or await self._lost_its_copy(request, answer)):
            return None

        async def look() -> tuple[frozenset[str], frozenset[str] | None]:
            await proxy.look_again(HELD_POLL_S)
            now = proxy.routes.get(route.id, route)
            return now.ready_copies(), now.litellm_routed

        if not await litellm_replay.settle(look, request.before, deadline(proxy.hold_timeout_s, request.headers)):
            return None
        url = proxy.routes.get(route.id, route).service_url or target.url
        log.info("LiteLLM lost a completion of endpoint %s with a dying copy; sending it once more", route.id)
        assert request.renewed is not None
        try:
            return await proxy.upstream.request(request.method, url + request.path,
                                                to_target(target, request.renewed()), body)
        except UpstreamError as error:
            log.warning("the replay to LiteLLM at %s failed: %s", url, error)
            return None

    async def _lost_its_copy(self, request: ProxyRequest, answer: litellm_replay.BufferedAnswer) -> bool:
        """LiteLLM said it has no copy of the model, and the pool this proxy has seen serving lost the copies it
        routed to as the request went in: LiteLLM's sync hook dropped a dying copy a moment before this proxy's
        routing table did. A request for a model the endpoint does not serve finds the copies unchanged, and gets
        LiteLLM's 400 after that one table read (~HELD_POLL_S)."""
        route = request.route
        if route is None or request.before is None or route.id not in self.proxy.served or not answer.no_deployment():
            return False
        # A routing table read after the answer: the refreshes stay HELD_POLL_S apart (shared by every request that
        # waits, so a stranger's requests for unknown models cost the API nothing more), and a genuine 400 waits that.
        await asyncio.sleep(HELD_POLL_S)
        await self.proxy.look_again(HELD_POLL_S)
        return self.proxy.routes.get(route.id, route).routable() != request.before

    async def _second_try(self, request: ProxyRequest, route: Route, target: Replica, error: UpstreamError,
                          ) -> tuple[Replica, Answer] | None:
        """After a first attempt that got no answer: wait for the endpoint's restarting LiteLLM, or send a
        replayable pool request once to another copy."""
        body, proxy, renewed = request.upstream_body, self.proxy, request.renewed
        assert renewed is not None
        if not isinstance(body, bytes) or not (error.sent_nothing or request.retriable):
            return None
        if route.fronts_pool and target.copy_id == "service":
            def service_url() -> str | None:
                return proxy.routes.get(route.id, route).service_url or None
            return await retry.await_service(proxy.upstream, service_url, request.method, request.path, renewed, body,
                                             deadline(min(proxy.hold_timeout_s, proxy.holds.front_hold_s),
                                                      request.headers), log,
                                             # its one replay is spent when LiteLLM died with this request
                                             replayable=error.refused)
        if not error.sent_nothing:
            return None
        if not (request.retriable and route.pool):
            return None
        other = route.target(request.session_id, exclude=frozenset({target.copy_id}))
        now = renewed()
        return await retry.other_copy(proxy.upstream, other, request.method, request.path,
                                      to_target(other, now) if other else now, body, log)
