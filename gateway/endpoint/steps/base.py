"""Step: what every step of the endpoint proxy's pipeline is (gateway/endpoint/pipeline.py orders and links them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway.endpoint.proxy_request import ProxyRequest

if TYPE_CHECKING:
    from gateway.endpoint.endpoint_proxy import EndpointProxy


async def _nothing_after(request: ProxyRequest) -> None:
    return None


class Step:
    """One named step. Called with the request, it answers it itself (a refusal, a held request's 503) and returns
    False, or returns True for the next step to take it. A step that must hold something around the steps after it
    (the forward step: the deadline, the copy's in-flight count) runs them itself with `await self.rest(request)`
    and returns False; one that settles something once the request is over, whatever ended it, does so in `finish`
    (the limits step: its ticket). Only those steps nest: every level a request's task runs under costs each
    streamed chunk (docs/performance.md).

    `proxy` holds what outlives a request (the routing table, caches, counters); a step reads settings there at each
    request, since they may be set after the proxy is made."""

    __slots__ = ("proxy", "rest")

    def __init__(self, proxy: EndpointProxy) -> None:
        self.proxy = proxy
        self.rest: Callable[[ProxyRequest], Awaitable[None]] = _nothing_after  # the steps after this one

    async def __call__(self, request: ProxyRequest) -> bool:
        raise NotImplementedError

    async def finish(self, request: ProxyRequest) -> None:
        """Once the request is over, whatever ended it (called for the steps that define it, last step first)."""
