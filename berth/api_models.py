"""The REST client's model registry methods (berth/api_client.py's ApiClient has them): register, list,
describe, remove, record jobs, evict the cache; and what model jobs and workflows call internally."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, body, many, one, segment

if TYPE_CHECKING:
    from berth.contracts import (
        EvictRequest,
        EvictResult,
        JobStarted,
        ModelCreate,
        ModelJobRecord,
        ModelJobSpec,
        ModelProgressReport,
        ModelRecord,
        ModelReleased,
        ModelStateReport,
        ModelUse,
        ModelUseAnswer,
    )


class ModelsApi(ApiTransport):
    """One method per model route, each returning the model its route declares."""

    async def add_model(self, request: ModelCreate) -> ModelRecord:
        return one(contracts.ModelRecord, await self.request("POST", "/v1/models", json=body(request)))

    async def models(self) -> list[ModelRecord]:
        return many(contracts.ModelRecord, await self.request("GET", "/v1/models"))

    async def describe_model(self, name: str) -> ModelRecord:
        return one(contracts.ModelRecord, await self.request("GET", f"/v1/models/{segment(name)}"))

    async def model_status(self, name: str) -> ModelRecord:
        return one(contracts.ModelRecord, await self.request("GET", f"/v1/models/{segment(name)}/status"))

    async def remove_model(self, name: str) -> ModelRecord:
        return one(contracts.ModelRecord, await self.request("DELETE", f"/v1/models/{segment(name)}"))

    async def materialize_model(self, name: str) -> JobStarted:
        return one(contracts.JobStarted, await self.request("POST", f"/v1/models/{segment(name)}/materialize"))

    async def verify_model(self, name: str) -> JobStarted:
        return one(contracts.JobStarted, await self.request("POST", f"/v1/models/{segment(name)}/verify"))

    async def model_jobs(self) -> list[ModelJobRecord]:
        return many(contracts.ModelJobRecord, await self.request("GET", "/v1/model-jobs"))

    async def evict_model_cache(self, request: EvictRequest) -> EvictResult:
        return one(contracts.EvictResult, await self.request("POST", "/v1/models/cache/evict", json=body(request)))

    # --- for model jobs and workflows (Berth's own services) ------------------------------------------
    async def model_job_spec(self, model_id: str) -> ModelJobSpec:
        return one(contracts.ModelJobSpec, await self.request("GET", f"/v1/internal/models/{segment(model_id)}"))

    async def report_model_state(self, model_id: str, report: ModelStateReport) -> None:
        await self.request("PUT", f"/v1/internal/models/{segment(model_id)}/state", json=body(report))

    async def report_model_progress(self, model_id: str, report: ModelProgressReport) -> None:
        await self.request("PUT", f"/v1/internal/models/{segment(model_id)}/progress", json=body(report))

    async def use_model(self, request: ModelUse) -> ModelUseAnswer:
        return one(contracts.ModelUseAnswer, await self.request("POST", "/v1/internal/models/use", json=body(request)))

    async def release_models(self, workflow_id: str) -> ModelReleased:
        sent = body(contracts.ModelRelease(workflow_id=workflow_id))
        return one(contracts.ModelReleased, await self.request("POST", "/v1/internal/models/release", json=sent))
