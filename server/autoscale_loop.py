"""The autoscaler's loop, in the control worker: every tick, take (or renew) the autoscaler's lease through
the API, read the pools and the load reports any API replica received (server/load_reports.py), and send
the decision `server.autoscaler.decide` takes to each pool's workflow `scale` update.

The lease makes it one autoscaler per stack whatever runs the loop: a second control worker's loop reads
nothing and decides nothing until the holder's lease lapses (it stopped renewing: it is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable
from datetime import timedelta

from temporalio.client import Client, WorkflowUpdateFailedError

from berth.api_client import ApiClient
from server.autoscaler import (
    CountingCopies,
    FrontDoorRates,
    LiteLLMRates,
    PoolMemory,
    PoolPolicy,
    ProxiedRates,
    decide,
    policy_from_annotations,
)
from server.copy_activity import CopyActivity, CopyTarget
from server.load_reports import KEEP_S, AutoscaledPool, AutoscalerLease, AutoscalerView, LoadReport, Source
from workflows.payloads import PoolStatus, ScaleRequest
from workflows.pool_workflow import PoolWorkflow

log = logging.getLogger("berth.autoscaler")
AUTOSCALE_EVERY_S = 1.0
LEASE_S = 5.0  # a holder renews it every tick; a stopped one is replaced this long after its last tick


class Meters:
    """The request rates the pools are sized by, rebuilt from the store's load reports: each report is
    fed once, in the order the reports were received, to the same rate windows the API once kept."""

    def __init__(self) -> None:
        self.front_door = FrontDoorRates()  # counted by the endpoint proxy
        self.litellm = LiteLLMRates()  # posted by a pool's LiteLLM sync hook
        self.proxied = ProxiedRates(self.litellm, self.front_door)
        self._fed: dict[int, float] = {}  # report id → when it was received, while the store keeps it

    def feed(self, reports: Iterable[LoadReport], now: float) -> None:
        for report in reports:
            if report.id in self._fed:
                continue  # a report stays in the store's window for several ticks
            self._fed[report.id] = report.at
            if report.source is Source.FRONT_DOOR:
                self.front_door.add(report.endpoint_id, report.requests, report.at)
            else:
                self.litellm.add_snapshot(report.endpoint_id, report.worker_pid or 0, report.worker_started_at or 0.0,
                                          report.requests, report.at, tuple(report.routed or ()))
        for report_id in [i for i, at in self._fed.items() if at < now - 2 * KEEP_S]:
            del self._fed[report_id]  # the store no longer has it either (bounded)


class Autoscaler:
    def __init__(self, api: ApiClient, temporal: Client, holder: str | None = None) -> None:
        self.api, self.temporal = api, temporal
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.copies = CopyActivity(clock=time.time)  # wall time, as the reports' times are
        self.meters = Meters()
        self.memories: dict[str, PoolMemory] = {}

    async def run_forever(self) -> None:
        try:
            while True:
                await asyncio.sleep(AUTOSCALE_EVERY_S)
                try:
                    await self.tick()
                except Exception as error:  # noqa: BLE001 — the loop must outlive any one failure; say what it was
                    log.warning("autoscaler tick failed: %s: %s", type(error).__name__, error)
        finally:
            await self.copies.aclose()

    async def tick(self) -> None:
        lease = AutoscalerLease(holder=self.holder, ttl_s=LEASE_S)
        view = AutoscalerView.model_validate(
            await self.api.request("POST", "/v1/internal/autoscaler", json=lease.model_dump(mode="json")))
        if not view.leader:
            self.memories.clear()  # another holder decides; this one starts afresh if it takes over
            return
        self.meters.feed(view.reports, time.time())
        pools = [(pool, policy_from_annotations(pool.annotations)) for pool in view.pools]
        active = [(pool, policy) for pool, policy in pools
                  if policy is not None and (policy.min_replicas == 0 or policy.target_requests_per_s > 0)]
        # Only a pool that may go to zero needs its copies' own counters (its idleness decides a cold start).
        await self.copies.observe(CopyTarget(endpoint_id=pool.endpoint_id, copy_id=copy_id, url=url)
                                  for pool, policy in active if policy.min_replicas == 0
                                  for copy_id, url in pool.ready_copies.items())
        now = time.time()
        for pool, policy in active:
            await self._scale(pool, policy, now)

    async def _scale(self, pool: AutoscaledPool, policy: PoolPolicy, now: float) -> None:
        handle = self.temporal.get_workflow_handle(pool.workflow_id)
        status: PoolStatus = await handle.query(PoolWorkflow.status, rpc_timeout=timedelta(seconds=5))
        if status.phase.value != "ready":
            return  # starting copies are not idle, a pool at zero waits for a request, stopping is final
        memory = self.memories.setdefault(pool.endpoint_id, PoolMemory())
        # Proxy=true: the rate measured at the pool's LiteLLM proxy; Proxy=false: at the endpoint proxy.
        fronted = bool(pool.annotations.get("proxy"))
        source = CountingCopies(self.meters.proxied if fronted else self.meters.front_door, self.copies)
        decision = decide(policy, status.desired_copies, source.load(pool.endpoint_id, now), memory, now)
        if decision is None or decision[0] == status.desired_copies:
            return
        if fronted and decision[0] > 0:
            decision = (decision[0], decision[1] + " (rate measured at the LiteLLM proxy)")
        log.info("autoscaler: %s to %d copies: %s", pool.workflow_id, decision[0], decision[1])
        with contextlib.suppress(WorkflowUpdateFailedError):  # e.g. stopping meanwhile
            await handle.execute_update(
                PoolWorkflow.scale, ScaleRequest(replicas=decision[0], reason=decision[1], source="autoscaler"))
