"""The endpoint proxy's request pipeline: the steps a request to `/endpoints/<id>/…` takes, in order, each in its
own module under gateway/endpoint/steps/. The order is declared here, once; a new proxy feature is one more step.

Each step gets the request (gateway/endpoint/proxy_request.py) and answers it or lets the next one take it
(gateway/endpoint/steps/base.py). The steps are made and linked once, with the proxy: a request allocates nothing
for the pipeline but itself."""

from __future__ import annotations

import functools

from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps import credentials, deadline, forward, hold, limits, relay, retry, route, scope
from gateway.endpoint.steps.base import ProxyParts, Step

ORDER: tuple[type[Step], ...] = (
    route.FindRoute,  # the endpoint in the routing table (404); LiteLLM's /key/* on it; routes no copy serves
    credentials.Credentials,  # an API key (its verdict, its model) or an endpoint token: who is calling
    scope.Scope,  # public, user, group, organization: 401 / 403
    limits.Limits,  # the LimitPolicy and the key's own limits and quota: a ticket, or 429 / 413 / 400 / 503
    deadline.Deadline,  # x-request-timeout and a declared body over the limit: 400 / 413 (gateway/edge/exchange.py)
    hold.Hold,  # the session and the copy; none routable: held while the pool wakes, or 503 / 429
    forward.Forward,  # the first attempt upstream; it and the steps after it within the deadline and idle clock
    retry.Retry,  # no answer: another copy, or the restarting LiteLLM; a completion LiteLLM lost: sent again
    relay.Relay,  # the answer, streamed to the client
)


class Pipeline:
    """ORDER's steps for one proxy. Calling it takes a request through them; then each step's `finish`."""

    __slots__ = ("finishing", "steps")

    def __init__(self, proxy: ProxyParts) -> None:
        self.steps = tuple(kind(proxy) for kind in ORDER)
        for index, step in enumerate(self.steps):
            step.rest = functools.partial(self.run_from, index + 1)
        self.finishing = tuple(step for step in reversed(self.steps) if type(step).finish is not Step.finish)

    async def __call__(self, request: ProxyRequest) -> None:
        # `finish` is awaited after the handler, not in a `finally`: berth/compiled.py's rule for compiled modules.
        try:
            await self.run_from(0, request)
        except BaseException as error:  # cancelled too: each `finish` still runs, then it goes on up
            failed: BaseException | None = error
        else:
            failed = None
        for step in self.finishing:
            await step.finish(request)
        if failed is not None:
            raise failed

    async def run_from(self, first: int, request: ProxyRequest) -> None:
        """The steps from `first` on, until one has answered the request."""
        steps = self.steps
        for index in range(first, len(steps)):
            if not await steps[index](request):
                return
