"""The REST client's explain method (berth/api_client.py's ApiClient has it): a module of its own, importing only its
route's contracts, so that `berth explain placement` does not import every contract (issue 33). The scaling
explanation is RolloutsApi.explain_scaling (berth/api_rollouts.py)."""

from __future__ import annotations

from berth.api_transport import ApiTransport, one, segment
from berth.contracts.explain import PlacementExplanation


class ExplainApi(ApiTransport):
    async def explain_placement(self, target_id: str) -> PlacementExplanation:
        """Where the scheduler placed a workflow's copies (or one copy) and why, and what an unplaced copy meets."""
        return one(PlacementExplanation, await self.request("GET", f"/v1/explain/placement/{segment(target_id)}"))
