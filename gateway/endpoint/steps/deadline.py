"""Deadline step: the request's Exchange (gateway/edge/exchange.py) — its `x-request-timeout` (400 outside
1-300 s) and a declared body over the limit (413), its body limit the LimitPolicy's. The forward step runs the
upstream exchange within it; the hold before that has its own deadline."""

from __future__ import annotations

from gateway.edge.exchange import admit
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step


class Deadline(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        proxy, route = self.proxy, request.route
        assert route is not None
        limits = proxy.admission.exchange_limits(proxy.limits, route.limits)  # its body limit: the LimitPolicy's
        exchange = await admit(limits, route.service, route.id, request.headers, request.receive, request.send)
        if exchange is None:
            return False  # answered: 400 (x-request-timeout outside 1-300 s) or 413 (a Content-Length over the limit)
        if route.wakeable:
            proxy.load.admitted(route.id)  # the autoscaler's rate and idle clock
        request.exchange = exchange
        return True
