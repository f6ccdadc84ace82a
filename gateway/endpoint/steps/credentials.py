"""Credentials step: who is calling — a Berth API key (its verdict from the control plane, its model checked
against the body: gateway/endpoint/key_gate.py) or an endpoint token (gateway/endpoint/token_identity.py). A key
refused is answered here (401, 403, 413, 503); a token that names nobody leaves the caller anonymous, for the
scope step to judge."""

from __future__ import annotations

from gateway.edge.credentials import find_key
from gateway.endpoint.key_gate import KeyRefusal
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step


class Credentials(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        route = request.route
        assert route is not None
        presented = find_key(request.headers)
        if presented is not None:
            try:
                keyed = await self.proxy.keys.check(presented, request.endpoint_id, request.receive)
            except KeyRefusal as refusal:
                refused: KeyRefusal | None = refusal
            else:
                refused = None
            if refused is not None:  # answered outside the handler: berth/compiled.py's rule for compiled modules
                request.audit.key_id = refused.key_id
                await refused.answer(request.send)
                return False
            request.keyed, request.identity, request.body = keyed, keyed.identity, keyed.body
            request.strip_authorization, request.receive = True, keyed.receive
            request.audit.key_id = keyed.verdict.key_id
        else:
            request.identity, request.strip_authorization = self.proxy.tokens.of(
                request.headers, request.endpoint_id, route.revoked_tokens)
        identity = request.identity
        request.audit.user = identity.user if identity is not None else None  # a refusal names whom it refused
        return True
