"""Relay step: the upstream's answer to the client, streamed as it comes (gateway/edge/upstream.py `relay`); a
model listing has its state-dir paths taken out (gateway/endpoint/model_cards.py)."""

from __future__ import annotations

import logging

from gateway.edge.upstream import relay
from gateway.endpoint import model_cards
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step

log = logging.getLogger("berth.proxy")


class Relay(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        response, target = request.response, request.target
        assert response is not None and target is not None
        if model_cards.is_listing(request.method, request.rest):
            await model_cards.relay_listing(response, request.send, log, target.url)  # no state-dir paths
        else:
            await relay(response, request.send, log, "upstream", target.url, request.receive)
        return True
