"""Control-side activities: placement, service ports, replica publication, the endpoint's service and
endpoint clean-up, through the API."""

from __future__ import annotations

from temporalio import activity

from berth.api_client import ApiClient
from workflows.payloads import (
    CleanupInput,
    EndpointService,
    ReplicaRecord,
    ReserveRequest,
    ReserveResult,
    ServicePort,
    ServicePortRequest,
)


class ControlActivities:
    def __init__(self, api: ApiClient) -> None:
        self.api = api

    @activity.defn(name="reserve_placement")
    async def reserve_placement(self, request: ReserveRequest) -> ReserveResult:
        return await self.api.reserve(request)

    @activity.defn(name="release_placement")
    async def release_placement(self, copy_id: str) -> None:
        await self.api.release(copy_id)

    @activity.defn(name="publish_replica")
    async def publish_replica(self, record: ReplicaRecord) -> None:
        await self.api.publish_replica(record)

    @activity.defn(name="unpublish_replica")
    async def unpublish_replica(self, copy_id: str) -> None:
        await self.api.unpublish_replica(copy_id)

    @activity.defn(name="remove_endpoint")
    async def remove_endpoint(self, request: CleanupInput) -> None:
        await self.api.remove_endpoint(request.endpoint_id)

    @activity.defn(name="reserve_service_port")
    async def reserve_service_port(self, request: ServicePortRequest) -> ServicePort:
        return await self.api.reserve_service_port(request)

    @activity.defn(name="set_endpoint_service")
    async def set_endpoint_service(self, update: EndpointService) -> None:
        await self.api.set_endpoint_service(update)
