"""Step: what every step of the endpoint proxy's pipeline is (gateway/endpoint/pipeline.py links them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.endpoint.proxy_request import ProxyRequest

if TYPE_CHECKING:
    from gateway.endpoint.endpoint_proxy import EndpointProxy


class Step:
    """One named step: it answers the request itself (a refusal, a held request's 503) or passes it on with
    `await self.next(request)`, and may act once the steps after it are done. `proxy` holds what outlives a request
    (the routing table, caches, counters); a step reads settings there at each request, since they may be set after
    the proxy is made."""

    __slots__ = ("next", "proxy")

    def __init__(self, proxy: EndpointProxy) -> None:
        self.proxy = proxy
        self.next: Step = END

    async def __call__(self, request: ProxyRequest) -> None:
        raise NotImplementedError


class _End(Step):
    """After the last step: nothing left to do (the relay has answered)."""

    __slots__ = ()

    def __init__(self) -> None:  # linked to no proxy
        pass

    async def __call__(self, request: ProxyRequest) -> None:
        return None


END: Step = _End()
