"""Limits step: admit the request under the cluster's LimitPolicy, the endpoint's override and the key's own limits
(gateway/endpoint/admission.py), then spend one of the key's lifetime quota — last, so that a request refused for
another limit spends none. Past it the request is admitted (its audit ATTEMPT). Once the request is over, whatever
ended it, its ticket is settled with the tokens the answer used."""

from __future__ import annotations

from gateway.endpoint.admission import refuse, saying_priority_denied
from gateway.endpoint.key_gate import KeyRefusal
from gateway.endpoint.limits import Refused
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step
from gateway.endpoint.usage import charged_tokens


class Limits(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        route, identity, keyed = request.route, request.identity, request.keyed
        assert route is not None
        try:
            # After the scope check: a refused caller counts nowhere.
            admitted = await self.proxy.admission.admit(route, request.headers, identity,
                                                        keyed.verdict if keyed else None, request.body, request.receive)
            request.ticket, request.receive, request.body = admitted.ticket, admitted.receive, admitted.body
            if admitted.priority_denied:
                request.send = saying_priority_denied(request.send)
            if keyed is not None:
                await self.proxy.keys.spend(keyed.verdict)
        except (KeyRefusal, Refused) as refusal:
            refused: KeyRefusal | Refused | None = refusal
        else:
            refused = None
        if refused is not None:  # answered outside the handler: berth/compiled.py's rule for compiled modules
            await (refused.answer(request.send) if isinstance(refused, KeyRefusal) else refuse(refused, request.send))
            return False
        request.audit.admit(identity.user if identity is not None else None)
        return True

    async def finish(self, request: ProxyRequest) -> None:
        if request.ticket is not None:  # whatever ended it: the answer, a client gone mid-stream, an error
            await request.ticket.finish(charged_tokens(request.meter.usage(), request.body))
