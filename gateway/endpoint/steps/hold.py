"""Hold step: the session the request keeps its copy by (gateway/endpoint/session_key.py) and the copy it goes
to; with none routable, a pool is woken and the request held (gateway/endpoint/hold.py), a service refused."""

from __future__ import annotations

from gateway.endpoint import session_key
from gateway.endpoint.admission import refuse
from gateway.endpoint.limits import Refused
from gateway.endpoint.proxy_request import ProxyRequest
from gateway.endpoint.steps.base import Step


class Hold(Step):
    __slots__ = ()

    async def __call__(self, request: ProxyRequest) -> bool:
        proxy, route, exchange = self.proxy, request.route, request.exchange
        assert route is not None and exchange is not None
        try:
            session_id = request.session_id = await session_key.of_request(route, request.headers, exchange)
        except Refused as refusal:  # a body nested too deep to parse
            refused: Refused | None = refusal
        else:
            refused = None
        if refused is not None:  # answered outside the handler: berth/compiled.py's rule for compiled modules
            await refuse(refused, request.send)
            return False
        target = route.target(session_id) or await proxy.holds.when_none_routable(
            route, request.send, request.headers, session_id, proxy.served)
        if target is None:
            return False  # answered: 503 (nothing to wait for, or the deadline passed) or 429 (too many waiting)
        request.target = target
        request.audit.copy_id = target.copy_id
        return True
