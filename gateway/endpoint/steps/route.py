"""Route step: the endpoint the request names, from the routing table (404 when unknown); LiteLLM's `/key/*` routes
on it are answered from Berth's keys (gateway/endpoint/litellm_keys.py), and a model copy's routes other than the
OpenAI API are refused (gateway/edge/openai_routes.py)."""

from __future__ import annotations

from gateway.edge import openai_routes
from gateway.edge.asgi import plain
from gateway.endpoint import litellm_keys
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step


class FindRoute(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        proxy = self.proxy
        route = await proxy.route(request.endpoint_id)
        if route is None:
            await plain(request.send, 404, b"Unknown endpoint")
            return False
        # LiteLLM's /key/* from Berth's keys: before the token check (the master key is not a Berth token). Only a
        # LiteLLM-fronted pool has them: the test here spares every other request a call into interpreted code.
        if route.fronts_pool and await litellm_keys.serve(proxy, route, request.scope, request.receive, request.send,
                                                          request.rest):
            return False
        if route.service in openai_routes.MODEL_UPSTREAMS and await openai_routes.refused(request.send, request.rest):
            return False  # only the OpenAI routes reach a copy: the rest of vLLM's answer without its key
        request.route = route
        return True
