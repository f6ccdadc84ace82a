"""Scope step: the endpoint's one scope rule (berth/scopes.py). Public: everyone passes, and a token identifies
only a caller of the endpoint's organization; otherwise 401 without a caller, 403 for one outside the scope."""

from __future__ import annotations

from berth.scopes import Scope as EndpointScope
from gateway.edge.asgi import plain
from gateway.endpoint.error_answers import forbidden
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step


class Scope(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        route, identity = request.route, request.identity
        assert route is not None
        if route.scope is EndpointScope.PUBLIC:
            if identity is not None and identity.org != route.org:
                request.identity = None
        elif identity is None:
            await plain(request.send, 401, b"Unauthorized")
            return False
        elif not route.admits(identity):
            await plain(request.send, 403, forbidden(request.endpoint_id, route).encode())
            return False
        return True
