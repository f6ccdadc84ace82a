"""The REST client's explain methods (berth/api_client.py's ApiClient has them): a module of its own, importing only its
routes' contracts, so that `berth explain placement` does not import every contract (issue 33). The scaling
explanation is RolloutsApi.explain_scaling (berth/api_rollouts.py)."""

from __future__ import annotations

from berth.api_transport import ApiTransport, one, segment
from berth.contracts.explain import FailureExplanation, PlacementExplanation, RoutingExplanation


class ExplainApi(ApiTransport):
    async def explain_placement(self, target_id: str) -> PlacementExplanation:
        """Where the scheduler placed a workflow's copies (or one copy) and why, and what an unplaced copy meets."""
        return one(PlacementExplanation, await self.request("GET", f"/v1/explain/placement/{segment(target_id)}"))

    async def explain_routing(self, endpoint_id: str) -> RoutingExplanation:
        """Each copy behind an endpoint, included in its routing or excluded and why."""
        return one(RoutingExplanation, await self.request("GET", f"/v1/explain/routing/{segment(endpoint_id)}"))

    async def explain_failure(self, target_id: str) -> FailureExplanation:
        """Every recorded end of a copy (or of each copy of a workflow), with its ranks' last log lines."""
        return one(FailureExplanation, await self.request("GET", f"/v1/explain/failure/{segment(target_id)}"))
