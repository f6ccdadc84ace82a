"""The endpoint proxy's own error answers: 403 (the caller is outside the endpoint's scope), 502 (no answer
from upstream) and 503 (a Proxy=true endpoint's LiteLLM is being restarted)."""

from __future__ import annotations

from berth.scopes import Scope
from gateway.edge.asgi import json_answer
from gateway.edge.routing import Replica
from gateway.edge.upstream import Send
from gateway.endpoint.route_table import Route


def forbidden(endpoint_id: str, route: Route) -> str:
    """The 403 body: which scope shut the caller out."""
    who = {Scope.USER: f"only its owner ({route.owner})", Scope.GROUP: "members of its groups",
           Scope.ORGANIZATION: f"members of organization {route.org}"}.get(route.scope, "")
    return (f"Forbidden: endpoint {endpoint_id} is {route.scope.value}-scoped ({who} may call it) "
            "and you are outside it")


async def upstream_failed(send: Send, route: Route, target: Replica) -> None:
    """No answer from upstream, nothing sent to the client. A Proxy=true endpoint's LiteLLM that refuses
    or resets the connection is down and being started again (PoolWorkflow's back-off): 503 with
    Retry-After, as documented (docs/architecture.md), not a 502 that reads as a broken model."""
    if route.fronts_pool and target.copy_id == "service":
        await front_restarting(send)
        return
    await json_answer(send, 502, b'{"error":{"message":"The model service did not answer; '
                           b'retry shortly.","type":"bad_gateway","code":502}}')


async def front_restarting(send: Send) -> None:
    """A Proxy=true endpoint's LiteLLM is down and being started again: the documented 503."""
    await json_answer(send, 503, b'{"error":{"message":"The endpoint\'s LiteLLM proxy is not answering (it is '
                      b'being restarted); retry shortly.","type":"service_unavailable","code":503}}',
                      [(b"retry-after", b"5")])
