"""Forward step: the first attempt upstream — the client's headers less Berth's credentials, with the signed
caller assertion (gateway/endpoint/upstream_headers.py), to the copy the hold step chose, within the request's
deadline and idle clock (gateway/edge/exchange.py). What came back (an answer, or no answer) is the retry step's
to judge; the copy's in-flight count covers every step after this one."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator

from gateway.edge.asgi import body_stream
from gateway.edge.upstream import UpstreamError
from gateway.endpoint.load_report import answered, failed
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step
from gateway.endpoint.upstream_headers import to_target

log = logging.getLogger("berth.proxy")

STREAMED = re.compile(rb'"stream"\s*:\s*true')
# How much of a replayable (non-streamed) answer is read before it is relayed, when it did not come whole at first.
WHOLE_ANSWER_BYTES = 1 << 20


class Forward(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        exchange = request.exchange
        assert exchange is not None
        # From here on the body is counted against its limit, and the answer watched for the idle clock.
        request.receive, request.send = exchange.receive, exchange.send
        await exchange.run(self._forward(request))
        return False  # the steps after it ran within the exchange

    async def _forward(self, request: ProxyRequest) -> None:
        proxy, route, target = self.proxy, request.route, request.target
        assert route is not None and target is not None
        upstream_headers, request.renewed = proxy.caller_headers.build(
            request.headers, request.strip_authorization, request.identity, route.id)
        path = f"/{request.rest}"
        if request.scope.get("query_string"):
            path += "?" + request.scope["query_string"].decode("latin-1")
        first = await request.receive()
        body: bytes | AsyncIterator[bytes]
        if first.get("more_body"):
            body = body_stream(first.get("body", b""), request.receive)
        else:
            body = first.get("body", b"")
        # One retry on another replica when nothing reached the client and the request can be replayed:
        # a whole body in hand and not a streamed completion.
        request.retriable = isinstance(body, bytes) and not STREAMED.search(body)
        request.path, request.upstream_body, method = path, body, request.scope["method"]
        request.method = method
        request.before = route.routable() if route.fronts_pool else None  # its copies as it goes in
        target.in_flight += 1
        outcome, sent_at = proxy.sent(route, target), time.monotonic()
        try:
            try:
                response = await proxy.upstream.request(method, target.url + path,
                                                        to_target(target, upstream_headers), body)
                if request.retriable and response.unfinished:
                    # Held whole before its head goes out: a copy that dies between its head and its body (a
                    # hung copy killed, test_pool_healing) is then retried on another copy, not cut.
                    await response.hold_whole(WHOLE_ANSWER_BYTES)
                request.response = response
                status = response.status
                answered(outcome, status, time.monotonic() - sent_at)
                request.clock.upstream_headers_s = time.monotonic() - sent_at
                if status >= 500:
                    target.failures.add(time.monotonic())  # lowest_failure weighs it
            except UpstreamError as error:
                failed(outcome)
                proxy.metrics.upstream_failed(route.id)
                log.warning("upstream %s failed: %s", target.url, error)
                failed_at = target.metrics.failed_at = time.monotonic()  # out until a scrape succeeds again
                target.failures.add(failed_at)
                request.failure = error
            await self.rest(request)  # retry, relay: within the deadline, the copy still counted in flight
        finally:
            (request.target or target).in_flight -= 1  # the retry step's copy, when it took another
