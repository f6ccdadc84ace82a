"""The autoscaler's loop in the API process: every tick, read each autoscaled pool's load and send the
decision `server.autoscaler.decide` takes to its workflow's `scale` update."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from temporalio.client import WorkflowUpdateFailedError

from server.autoscaler import CountingCopies, FrontDoorRates, PoolMemory, ProxiedRates, decide, policy_from_annotations
from server.copy_activity import CopyActivity, CopyTarget
from workflows.payloads import ScaleRequest, ServiceStatus
from workflows.service import ServiceWorkflow

if TYPE_CHECKING:
    from server.context import ServerContext

log = logging.getLogger("berth.server")
AUTOSCALE_EVERY_S = 1.0


async def autoscale_forever(context: ServerContext, rates: FrontDoorRates, proxied: ProxiedRates,
                            copies: CopyActivity) -> None:
    memories: dict[str, PoolMemory] = {}
    while True:
        await asyncio.sleep(AUTOSCALE_EVERY_S)
        try:
            await autoscale_once(context, rates, proxied, copies, memories)
        except Exception as error:  # noqa: BLE001 — the loop must outlive any one failure; say what it was
            log.warning("autoscaler tick failed: %s: %s", type(error).__name__, error)


async def autoscale_once(context: ServerContext, rates: FrontDoorRates, proxied: ProxiedRates,
                         copies: CopyActivity, memories: dict[str, PoolMemory]) -> None:
    endpoints = await run_in_threadpool(context.store.endpoints)
    pools = [(e, policy_from_annotations(e.annotations or {})) for e in endpoints]
    active = [(e, p) for e, p in pools
              if p is not None and (p.min_replicas == 0 or p.target_requests_per_s > 0)]
    # Only a pool that may go to zero needs its copies' own counters (its idleness decides a cold start).
    may_sleep = {e.id for e, p in active if p is not None and p.min_replicas == 0}
    replicas = await run_in_threadpool(context.store.replicas) if may_sleep else []
    await copies.observe(CopyTarget(endpoint_id=r.endpoint_id, copy_id=r.copy_id, url=r.url)
                         for r in replicas if r.endpoint_id in may_sleep and r.ready)
    if not active:
        return
    client = await context.temporal()
    now = time.monotonic()
    for endpoint, policy in active:
        assert policy is not None
        handle = client.get_workflow_handle(endpoint.workflow_id)
        status: ServiceStatus = await handle.query(ServiceWorkflow.status, rpc_timeout=timedelta(seconds=5))
        if status.phase.value != "ready":
            continue  # starting copies are not idle, a pool at zero waits for a request, stopping is final
        memory = memories.setdefault(endpoint.id, PoolMemory())
        # Proxy=true: the rate measured at the pool's LiteLLM proxy; Proxy=false: at the endpoint proxy.
        fronted = bool((endpoint.annotations or {}).get("proxy"))
        source = CountingCopies(proxied if fronted else rates, copies)
        decision = decide(policy, status.desired_replicas, source.load(endpoint.id, now), memory, now)
        if decision is None or decision[0] == status.desired_replicas:
            continue
        if fronted and decision[0] > 0:
            decision = (decision[0], decision[1] + " (rate measured at the LiteLLM proxy)")
        with contextlib.suppress(WorkflowUpdateFailedError):  # e.g. stopping meanwhile
            await handle.execute_update(
                ServiceWorkflow.scale,
                ScaleRequest(replicas=decision[0], reason=decision[1], source="autoscaler"))
