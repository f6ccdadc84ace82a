"""The session a request to an endpoint keeps its copy by (`routing.affinity`): its `x-session-id`, or — when it
sends none and there is a choice of copy to make — the PromptKey of its prompt (gateway/edge/prompt_key.py), with
the prompt's block hashes for a policy that reads them (prefix_affinity). The body is parsed only when more than
one copy is eligible."""

from __future__ import annotations

import time

from berth.bounded_parse import TooDeep
from gateway.edge import routing
from gateway.edge.asgi import header
from gateway.edge.exchange import Exchange
from gateway.edge.prompt_key import of_prompt, parsed
from gateway.endpoint.limits import Refused
from gateway.endpoint.route_table import Route

Headers = list[tuple[bytes, bytes]]


async def of_request(route: Route, headers: Headers, exchange: Exchange) -> str | None:
    """The endpoint proxy's session for a request: `x-session-id`, else the prompt's hash when the route
    picks among more than one eligible copy (the body is then read whole; `exchange` hands it on). Refused 400: a
    body nested too deep to parse."""
    session = header(headers, b"x-session-id")
    if session is not None or route.service_url or route.fronts_pool or len(route.pool) < 2:
        return session
    if len(routing.eligible(route.pool, time.monotonic())) < 2:
        return None
    body = await exchange.whole_body()
    try:
        return of_prompt(parsed(body), route.policy.reads_prompt) if body is not None else None
    except TooDeep as error:
        raise Refused(400, "nesting_depth", str(error)) from None
