"""Control-side activities: placement, service ports, replica publication, the endpoint's service, a
rollout's traffic split and revision health, and endpoint clean-up, through the API."""

from __future__ import annotations

import asyncio
import time

import httpx
from temporalio import activity

from berth.api_client import ApiClient
from berth.contracts import (
    CopyRecord,
    EndpointFront,
    FenceRequest,
    FrontPort,
    FrontPortRequest,
    ReserveRequest,
    ReserveResult,
    RevisionHealth,
    TrafficSplit,
)
from berth.security import ReplicaKeys
from gateway.edge.metrics import parse
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import CleanupInput, DrainInput, DrainResult
from workflows.rollout_payloads import HealthInput, ServeInput, TrafficInput

# Proxies refresh their routing table every second: after this long none sends a draining copy new work.
ROUTES_SETTLE_S = 1.5


class ControlActivities:
    def __init__(self, api: ApiClient, replica_keys: ReplicaKeys | None = None) -> None:
        self.api = api
        self.replica_keys = replica_keys  # the copies' keys: a drain reads the copy's /metrics with its own

    @implements(stubs.reserve_placement)
    async def reserve_placement(self, request: ReserveRequest) -> ReserveResult:
        return await self.api.reserve(request)

    @implements(stubs.release_placement)
    async def release_placement(self, copy_id: str) -> None:
        await self.api.release(copy_id)

    @implements(stubs.fence_placement)
    async def fence_placement(self, request: FenceRequest) -> None:
        await self.api.fence(request)

    @implements(stubs.publish_replica)
    async def publish_replica(self, record: CopyRecord) -> None:
        await self.api.publish_replica(record)

    @implements(stubs.unpublish_replica)
    async def unpublish_replica(self, copy_id: str) -> None:
        await self.api.unpublish_replica(copy_id)

    @implements(stubs.remove_endpoint)
    async def remove_endpoint(self, request: CleanupInput) -> None:
        await self.api.remove_endpoint(request.endpoint_id)

    @implements(stubs.drain_replica)
    async def drain_replica(self, request: DrainInput) -> DrainResult:
        """Mark the copy draining (proxies stop choosing it), then wait until its vLLM reports nothing
        running or waiting, or the grace runs out."""
        started = time.monotonic()
        await self.api.drain_replica(request.copy_id)
        await asyncio.sleep(min(ROUTES_SETTLE_S, request.grace_s))
        if request.url is None:
            return DrainResult(drained=True, waited_s=time.monotonic() - started)
        key = self.replica_keys.for_copy(request.copy_id) if self.replica_keys is not None else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0), headers=headers) as client:
            while time.monotonic() - started < request.grace_s:
                try:
                    response = await client.get(f"{request.url}/metrics")
                except httpx.HTTPError:
                    break  # the engine is gone: nothing left to wait for
                if response.status_code != 200:  # a refusal is not "nothing running": say it, stop waiting
                    activity.logger.warning("drain of %s: its /metrics answered %d", request.copy_id,
                                            response.status_code)
                    break
                figures = parse(response.text)
                if figures.get("running", 0.0) + figures.get("waiting", 0.0) == 0:
                    return DrainResult(drained=True, waited_s=time.monotonic() - started)
                activity.heartbeat()
                await asyncio.sleep(0.25)
            else:
                return DrainResult(drained=False, waited_s=time.monotonic() - started)
        return DrainResult(drained=True, waited_s=time.monotonic() - started)

    @implements(stubs.reserve_service_port)
    async def reserve_service_port(self, request: FrontPortRequest) -> FrontPort:
        return await self.api.reserve_service_port(request)

    @implements(stubs.set_endpoint_service)
    async def set_endpoint_service(self, update: EndpointFront) -> None:
        await self.api.set_endpoint_service(update)

    @implements(stubs.set_traffic)
    async def set_traffic(self, request: TrafficInput) -> None:
        await self.api.set_traffic(request.endpoint_id, TrafficSplit(weights=request.weights))

    @implements(stubs.revision_health)
    async def revision_health(self, request: HealthInput) -> RevisionHealth:
        return await self.api.revision_health(request.endpoint_id, request.revision, request.since)

    @implements(stubs.serve_revision)
    async def serve_revision(self, request: ServeInput) -> None:
        await self.api.serve_revision(request.workflow_id, request.revision)
