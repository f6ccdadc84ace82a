"""Step: what every step of the endpoint proxy's pipeline is (gateway/endpoint/pipeline.py orders and links them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from mypy_extensions import mypyc_attr

from gateway.endpoint.proxy_request import ProxyRequest

if TYPE_CHECKING:
    from berth.api_client import ApiClient
    from berth.security import TokenVerifier
    from gateway.edge.exchange import ProxyLimits
    from gateway.edge.proxy_metrics import ProxyMetrics
    from gateway.edge.routing import Replica
    from gateway.edge.upstream import Upstream
    from gateway.endpoint.admission import Admission
    from gateway.endpoint.hold import Holds
    from gateway.endpoint.key_gate import KeyGate
    from gateway.endpoint.load_report import LoadCounts, Outcome
    from gateway.endpoint.route_table import Route
    from gateway.endpoint.token_identity import TokenIdentities
    from gateway.endpoint.upstream_headers import CallerHeaders


class ProxyParts(Protocol):
    """What the steps read of their proxy: what outlives a request (gateway/endpoint/endpoint_proxy.py's
    EndpointProxy is it). Named here rather than imported from the proxy, which makes the pipeline: the steps stand
    below the proxy that runs them."""

    admission: Admission
    api: ApiClient  # and `verifier`: what LiteLLM's /key/* routes are answered with (gateway/endpoint/litellm_keys.py)
    caller_headers: CallerHeaders
    holds: Holds
    keys: KeyGate
    limits: ProxyLimits
    load: LoadCounts
    metrics: ProxyMetrics
    routes: dict[str, Route]
    served: set[str]
    tokens: TokenIdentities
    upstream: Upstream
    verifier: TokenVerifier

    @property
    def hold_timeout_s(self) -> float: ...

    async def look_again(self, age_s: float) -> None: ...

    async def route(self, endpoint_id: str) -> Route | None: ...

    def sent(self, route: Route, target: Replica) -> Outcome | None: ...


async def _nothing_after(request: ProxyRequest) -> None:
    return None


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (berth/compiled.py), a step need not be
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

    def __init__(self, proxy: ProxyParts) -> None:
        self.proxy = proxy
        self.rest: Callable[[ProxyRequest], Awaitable[None]] = _nothing_after  # the steps after this one

    async def __call__(self, request: ProxyRequest) -> bool:
        raise NotImplementedError

    async def finish(self, request: ProxyRequest) -> None:
        """Once the request is over, whatever ended it (called for the steps that define it, last step first)."""
