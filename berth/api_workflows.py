"""The REST client's catalog and workflow methods (berth/api_client.py's ApiClient has them): list and read
the catalog, start, list, describe, stop and read the logs of workflows. A module of its own, importing only
these routes' contracts, so that `berth workflow list` does not import every contract (issue 33)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, many, one, segment

if TYPE_CHECKING:
    from berth.contracts.catalog import EntryDetail, EntrySummary
    from berth.contracts.workflows import (
        WorkflowDefinitionView,
        WorkflowDescription,
        WorkflowLogs,
        WorkflowStarted,
        WorkflowStopped,
        WorkflowSummary,
    )


class WorkflowsApi(ApiTransport):
    """One method per catalog and workflow route, each returning the model its route declares."""

    async def catalog(self, category: str | None = None, tag: str | None = None) -> list[EntrySummary]:
        params = {k: v for k, v in {"category": category, "tag": tag}.items() if v}
        return many(contracts.EntrySummary, await self.request("GET", "/v1/catalog", params=params))

    async def catalog_entry(self, name: str) -> EntryDetail:
        return one(contracts.EntryDetail, await self.request("GET", "/v1/catalog/entry", params={"name": name}))

    async def start_workflow(self, entry: str, values: dict[str, Any], name: str | None = None) -> WorkflowStarted:
        submission: dict[str, Any] = {"entry": entry, "values": values}
        if name is not None:
            submission["name"] = name  # sent only when chosen: an older server never sees the field
        data = await self.request("POST", "/v1/workflows", json=submission)
        return one(contracts.WorkflowStarted, data)

    async def workflows(self) -> list[WorkflowSummary]:
        return many(contracts.WorkflowSummary, await self.request("GET", "/v1/workflows"))

    async def describe_workflow(self, workflow_id: str) -> WorkflowDescription:
        data = await self.request("GET", f"/v1/workflows/{segment(workflow_id)}")
        return one(contracts.WorkflowDescription, data)

    async def workflow_definition(self, workflow_id: str) -> WorkflowDefinitionView:
        data = await self.request("GET", f"/v1/workflows/{segment(workflow_id)}/definition")
        return one(contracts.WorkflowDefinitionView, data)

    async def stop_workflow(self, workflow_id: str) -> WorkflowStopped:
        data = await self.request("POST", f"/v1/workflows/{segment(workflow_id)}/stop")
        return one(contracts.WorkflowStopped, data)

    async def workflow_log(self, workflow_id: str, job: str | None, lines: int = 200) -> WorkflowLogs:
        params: dict[str, Any] = {"lines": lines}
        if job:
            params["job"] = job
        data = await self.request("GET", f"/v1/workflows/{segment(workflow_id)}/logs", params=params)
        return one(contracts.WorkflowLogs, data)
