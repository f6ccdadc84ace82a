"""The REST client's explain methods (berth/api_client.py's ApiClient has them): a module of its own, importing only its
routes' contracts, so that `berth explain placement` does not import every contract (issue 33). The scaling
explanation is RolloutsApi.explain_scaling (berth/api_rollouts.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, one, segment

if TYPE_CHECKING:
    from berth.contracts.explain import FailureExplanation, PlacementExplanation, RoutingExplanation


class ExplainApi(ApiTransport):
    async def explain_placement(self, target_id: str) -> PlacementExplanation:
        """Where the scheduler placed a workflow's copies (or one copy) and why, and what an unplaced copy meets."""
        data = await self.request("GET", f"/v1/explain/placement/{segment(target_id)}")
        return one(contracts.PlacementExplanation, data)

    async def explain_routing(self, endpoint_id: str) -> RoutingExplanation:
        """Each copy behind an endpoint, included in its routing or excluded and why."""
        data = await self.request("GET", f"/v1/explain/routing/{segment(endpoint_id)}")
        return one(contracts.RoutingExplanation, data)

    async def explain_failure(self, target_id: str) -> FailureExplanation:
        """Every recorded end of a copy (or of each copy of a workflow), with its ranks' last log lines."""
        return one(contracts.FailureExplanation, await self.request("GET", f"/v1/explain/failure/{segment(target_id)}"))
