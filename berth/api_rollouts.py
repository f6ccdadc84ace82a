"""The REST client's revision and rollout methods (berth/api_client.py's ApiClient has them): update a
workflow to a new revision, list and read its revisions, steer its rollout, drain it or a node with a
grace, read why the autoscaler sized it; and what the control worker calls internally for a rollout
(the traffic split, a revision's health) and for the autoscaler's explanation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, body, many, one, segment

if TYPE_CHECKING:
    from berth.contracts import (
        NodeState,
        RevisionHealth,
        Rollout,
        RolloutCommand,
        ScalingExplanation,
        TrafficSplit,
        WorkflowRevision,
        WorkflowRevisionDefinition,
        WorkflowScaled,
        WorkflowUpdated,
        WorkflowUpdateRequest,
    )


class RolloutsApi(ApiTransport):
    """One method per revision, rollout and scaling route, each returning the model its route declares."""

    async def update_workflow(self, workflow_id: str, request: WorkflowUpdateRequest) -> WorkflowUpdated:
        data = await self.request("POST", f"/v1/workflows/{segment(workflow_id)}/revisions", json=body(request))
        return one(contracts.WorkflowUpdated, data)

    async def workflow_revisions(self, workflow_id: str) -> list[WorkflowRevision]:
        data = await self.request("GET", f"/v1/workflows/{segment(workflow_id)}/revisions")
        return many(contracts.WorkflowRevision, data)

    async def workflow_revision(self, workflow_id: str, revision: int) -> WorkflowRevisionDefinition:
        data = await self.request("GET", f"/v1/workflows/{segment(workflow_id)}/revisions/{int(revision)}")
        return one(contracts.WorkflowRevisionDefinition, data)

    async def rollout_status(self, workflow_id: str) -> Rollout:
        return one(contracts.Rollout, await self.request("GET", f"/v1/workflows/{segment(workflow_id)}/rollout"))

    async def rollout_command(self, workflow_id: str, command: RolloutCommand) -> Rollout:
        data = await self.request("POST", f"/v1/workflows/{segment(workflow_id)}/rollout", json=body(command))
        return one(contracts.Rollout, data)

    async def drain_workflow(self, workflow_id: str, grace_s: float) -> WorkflowScaled:
        data = await self.request("POST", f"/v1/workflows/{segment(workflow_id)}/drain",
                                  json=body(contracts.WorkflowDrainRequest(grace_s=grace_s)))
        return one(contracts.WorkflowScaled, data)

    async def drain_node_with_grace(self, node_id: str, grace_s: float) -> NodeState:
        data = await self.request("POST", f"/v1/nodes/{segment(node_id)}/drain",
                                  json=body(contracts.WorkflowDrainRequest(grace_s=grace_s)))
        return one(contracts.NodeState, data)

    async def explain_scaling(self, workflow_id: str) -> ScalingExplanation:
        data = await self.request("GET", f"/v1/workflows/{segment(workflow_id)}/scaling")
        return one(contracts.ScalingExplanation, data)

    # --- internal: the control worker's ----------------------------------------------------------
    async def set_traffic(self, endpoint_id: str, split: TrafficSplit) -> None:
        await self.request("PUT", f"/v1/internal/endpoints/{segment(endpoint_id)}/traffic", json=body(split))

    async def revision_health(self, endpoint_id: str, revision: int, since: float) -> RevisionHealth:
        data = await self.request("GET", f"/v1/internal/endpoints/{segment(endpoint_id)}/revision-health",
                                  params={"revision": int(revision), "since": float(since)})
        return one(contracts.RevisionHealth, data)

    async def record_scaling(self, explanation: ScalingExplanation) -> None:
        await self.request("PUT", f"/v1/internal/workflows/{segment(explanation.workflow_id)}/scaling",
                           json=body(explanation))

    async def serve_revision(self, workflow_id: str, revision: int) -> None:
        await self.request("PUT", f"/v1/internal/workflows/{segment(workflow_id)}/served-revision",
                           json=body(contracts.ServedRevision(revision=revision)))
