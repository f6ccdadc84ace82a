"""The endpoint proxy's request pipeline: the steps a request to `/endpoints/<id>/…` takes, in order, each in its
own module under gateway/endpoint/steps/. The order is declared here, once; a new proxy feature is one more step.

Each step gets the request (gateway/endpoint/proxy_request.py) and answers it or passes it on
(gateway/endpoint/steps/base.py). The chain is linked once, when the proxy is made: a request allocates nothing
for it but itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.endpoint.steps import credentials, deadline, forward, hold, limits, relay, retry, route, scope
from gateway.endpoint.steps.base import Step

if TYPE_CHECKING:
    from gateway.endpoint.endpoint_proxy import EndpointProxy

ORDER: tuple[type[Step], ...] = (
    route.FindRoute,  # the endpoint in the routing table (404); LiteLLM's /key/* on it; routes no copy serves
    credentials.Credentials,  # an API key (its verdict, its model) or an endpoint token: who is calling
    scope.Scope,  # public, user, group, organization: 401 / 403
    limits.Limits,  # the LimitPolicy and the key's own limits and quota: a ticket, or 429 / 413 / 400 / 503
    deadline.Deadline,  # x-request-timeout and a declared body over the limit: 400 / 413 (gateway/edge/exchange.py)
    hold.Hold,  # the session and the copy; none routable: held while the pool wakes, or 503 / 429
    forward.Forward,  # the first attempt upstream, within the deadline and the idle clock
    retry.Retry,  # no answer: another copy, or the restarting LiteLLM; a completion LiteLLM lost: sent again
    relay.Relay,  # the answer, streamed to the client
)


def build(proxy: EndpointProxy) -> Step:
    """The first step of the chain, each step linked to the next."""
    chain = [kind(proxy) for kind in ORDER]
    for step, after in zip(chain, chain[1:], strict=False):
        step.next = after
    return chain[0]
