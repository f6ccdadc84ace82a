"""The autoscaler's loop, in the control worker: every tick, take (or renew) the autoscaler's lease through
the API, read the pools and the load reports any API replica received (server/store/load_reports.py), and send
the decision `control.autoscaler.decide` and the queue/TTFT rules (control/scaling_decision.py) take together
to each pool's workflow `scale` update; every tick's explanation is recorded on the workflow (its scaling
route), so `berth workflow explain-scaling` shows what was measured and why.

The lease makes it one autoscaler per stack whatever runs the loop: a second control worker's loop reads
nothing and decides nothing until the holder's lease lapses (it stopped renewing: it is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable
from datetime import timedelta

from temporalio.client import Client, WorkflowUpdateFailedError

from berth.api_client import ApiClient
from berth.contracts.pool_facts import PoolFacts
from berth.contracts.rollouts import ScalingExplanation
from berth.errors import BerthError
from berth.security import ReplicaKeys
from control.autoscaler import (
    CountingCopies,
    FrontDoorRates,
    LiteLLMRates,
    PoolMemory,
    PoolPolicy,
    ProxiedRates,
    decide,
    policy_from_annotations,
    rate_wants,
    resized_elsewhere,
)
from control.copy_activity import CopyActivity, CopyTarget
from control.scaling_decision import (
    CopyReading,
    QueueMemory,
    ScalingDecision,
    capped_by_quota,
    combine,
    decide_queue,
    measure,
)
from server.pool_query import pool_status
from server.store.load_reports import KEEP_S, AutoscaledPool, AutoscalerLease, AutoscalerView, LoadReport, Source
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
    def __init__(self, api: ApiClient, temporal: Client, holder: str | None = None,
                 replica_keys: ReplicaKeys | None = None) -> None:
        self.api, self.temporal = api, temporal
        self.replica_keys = replica_keys  # the copies' keys, for their /metrics (None: tests' unguarded copies)
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.copies = CopyActivity(clock=time.time)  # wall time, as the reports' times are
        self.meters = Meters()
        self.memories: dict[str, PoolMemory] = {}
        self.queue_memories: dict[str, QueueMemory] = {}

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
            self.queue_memories.clear()
            return
        self.meters.feed(view.reports, time.time())
        pools = [(pool, policy_from_annotations(pool.annotations)) for pool in view.pools]
        active = [(pool, policy) for pool, policy in pools
                  if policy is not None and (policy.min_replicas == 0 or policy.target_requests_per_s > 0
                                             or policy.queue_autoscaling)]
        # A pool that may go to zero needs its copies' own counters (its idleness decides a cold start); one
        # with queue/TTFT thresholds, their queues and TTFT. The others' copies are not scraped.
        await self.copies.observe(CopyTarget(endpoint_id=pool.endpoint_id, copy_id=copy_id, url=url,
                                             api_key=self._key(copy_id))
                                  for pool, policy in active if policy.min_replicas == 0 or policy.queue_autoscaling
                                  for copy_id, url in pool.ready_copies.items())
        now = time.time()
        for pool, policy in active:
            await self._scale(pool, policy, now)

    def _key(self, copy_id: str) -> str:
        return self.replica_keys.for_copy(copy_id) if self.replica_keys is not None else ""

    async def _scale(self, pool: AutoscaledPool, policy: PoolPolicy, now: float) -> None:
        handle = self.temporal.get_workflow_handle(pool.workflow_id)
        status: PoolStatus = await pool_status(handle, rpc_timeout=timedelta(seconds=5))
        if status.phase.value != "ready":
            return  # starting copies are not idle, a pool at zero waits for a request, stopping is final
        memory = self.memories.setdefault(pool.endpoint_id, PoolMemory())
        resized = resized_elsewhere(memory, status.desired_copies, self.queue_memories.get(pool.endpoint_id))
        # Proxy=true: the rate measured at the pool's LiteLLM proxy; Proxy=false: at the endpoint proxy.
        fronted = PoolFacts.from_annotations(pool.annotations).proxy
        source = CountingCopies(self.meters.proxied if fronted else self.meters.front_door, self.copies)
        load = source.load(pool.endpoint_id, now)
        rate = decide(policy, status.desired_copies, load, memory, now)
        if fronted and rate is not None and rate[0] > 0:
            rate = (rate[0], rate[1] + " (rate measured at the LiteLLM proxy)")
        readings = self._readings(pool)
        queue = None
        if policy.queue_autoscaling:
            queue_memory = self.queue_memories.setdefault(pool.endpoint_id, QueueMemory())
            queue = decide_queue(policy, status.desired_copies, readings, queue_memory, now)
        decision = combine(status.desired_copies, rate, queue, measure(readings, now, load.rate_rps),
                           rate_wants(policy, load))
        if resized:
            decision = dataclasses.replace(decision, reason=f"{decision.reason}; its windows started again: the "
                                           f"pool was resized to {status.desired_copies} outside the autoscaler")
        if decision.decision == "scale_out" and decision.desired > status.desired_copies:
            allowance = await self.api.scale_allowance(pool.workflow_id, status.desired_copies, decision.desired)
            decision = capped_by_quota(decision, status.desired_copies, allowance.allowed, allowance.refusal)
        await self._record(pool, policy, decision, now)
        if decision.desired == status.desired_copies:
            return
        log.info("autoscaler: %s to %d copies: %s", pool.workflow_id, decision.desired, decision.reason)
        with contextlib.suppress(WorkflowUpdateFailedError):  # e.g. stopping meanwhile
            await handle.execute_update(PoolWorkflow.scale, ScaleRequest(
                replicas=decision.desired, reason=decision.reason, source="autoscaler"))
            memory.size = decision.desired  # its own change: no window restarts for it

    def _readings(self, pool: AutoscaledPool) -> list[CopyReading]:
        readings = []
        for copy_id in pool.ready_copies:
            seen = self.copies.metrics(copy_id)
            readings.append(CopyReading(copy_id=copy_id) if seen is None else CopyReading(
                copy_id=copy_id, waiting=seen.waiting, running=seen.running, ttft_s=seen.recent_ttft_s,
                scraped_at=seen.scraped_at))
        return readings

    async def _record(self, pool: AutoscaledPool, policy: PoolPolicy, decision: ScalingDecision,
                      now: float) -> None:
        """Post the explanation (the API writes it only when it changed or a few seconds passed)."""
        explanation = ScalingExplanation(
            workflow_id=pool.workflow_id, at=now, desired=decision.desired, decision=decision.decision,
            reason=decision.reason, signal=decision.signal, policy=dataclasses.asdict(policy))
        try:
            await self.api.record_scaling(explanation)
        except BerthError as error:  # the decision still stands: recording it is for the reader
            log.info("autoscaler: recording %s's scaling failed: %s", pool.workflow_id, error)
