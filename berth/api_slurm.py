"""The REST client's Slurm method (berth/api_client.py's ApiClient has it): a module of its own, importing only its
route's contracts (issue 33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, one

if TYPE_CHECKING:
    from berth.contracts.slurm import SlurmNodes


class SlurmApi(ApiTransport):
    async def slurm_nodes(self) -> SlurmNodes:
        """Slurm's nodes where Slurm places the copies (issue 35); none otherwise."""
        return one(contracts.SlurmNodes, await self.request("GET", "/v1/slurm/nodes"))
