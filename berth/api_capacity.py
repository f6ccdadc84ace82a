"""The REST client's capacity method (berth/api_client.py's ApiClient has it): a module of its own, importing only
its route's contracts, so that `berth capacity` does not import every contract (issue 33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, one

if TYPE_CHECKING:
    from berth.contracts.capacity import Capacity


class CapacityApi(ApiTransport):
    async def capacity(self) -> Capacity:
        """Free and total GPUs per node, per GPU model and in total, and which entries would fit now."""
        return one(contracts.Capacity, await self.request("GET", "/v1/capacity"))
