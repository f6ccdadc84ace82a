"""The REST client's endpoint-history method (berth/api_client.py's ApiClient has it): a module of its own, importing
only its route's contracts (issue 33's habit)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, one, segment
from berth.contracts.endpoint_history import DEFAULT_WINDOW_S  # named at definition time

if TYPE_CHECKING:
    from berth.contracts.endpoint_history import EndpointHistory


class EndpointHistoryApi(ApiTransport):
    async def endpoint_history(self, endpoint_id: str, window_s: int = DEFAULT_WINDOW_S) -> EndpointHistory:
        """The endpoint's whole minutes of the last `window_s` seconds: requests, failures, latency, ready copies."""
        return one(contracts.EndpointHistory, await self.request("GET", f"/v1/endpoints/{segment(endpoint_id)}/history",
                                                                 params={"window": window_s}))
