"""ServiceWorkflow: the one generic workflow every catalog entry runs — weights, then a pool of
replica copies (child CopyWorkflows) behind the endpoint's service (its LiteLLM proxy), until stopped
or failed."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import EndpointService, ServicePort, ServicePortRequest
    from berth.settings import CONTROL_TASK_QUEUE, NODES_TASK_QUEUE, node_task_queue
    from workflows.authorized import refuse_signal, require_authorized
    from workflows.copy import CopyWorkflow
    from workflows.healing import SAME_FAILURES_TO_FAIL, Pacing, Verdict, decide, failure_signature
    from workflows.payloads import (
        CleanupInput,
        CopyInput,
        CopyResult,
        CopyStatus,
        DrainInput,
        DrainResult,
        Event,
        LiveCheck,
        Phase,
        ReplicaInfo,
        ScaleRequest,
        ScaleResult,
        ServiceExit,
        ServiceInput,
        ServiceRun,
        ServiceStatus,
        StopRequest,
        WeightsInput,
        WeightsResult,
    )
    from workflows.supervised import MAX_ADOPTIONS, agent_went_silent, not_adopted, start_supervised

MAX_EVENTS = 200
DOWNLOAD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=30), maximum_attempts=5,
    non_retryable_error_types=["GatedModel", "ModelNotFound", "RevisionNotFound", "VolumeFull", "HubRequest",
                               "WeightsError", "SecretError"],
)
SHORT = timedelta(seconds=60)
CONTROL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))
# A service process is restarted by this workflow (with back-off), never by Temporal behind its back
# (start_supervised runs it once).
SERVICE_BACKOFF_MAX_S = 60.0
# A run that lasted this long was healthy: the next crash is restarted after the first back-off again,
# as `berth up` does for its components (a month of rare crashes must not cost a minute each).
SERVICE_BACKOFF_RESET_S = 60.0
PROXY_SERVICE = "litellm"
FATAL_SERVICE_ERRORS = ("EndpointUnreachable", "ServiceConfig", "SecretError", "ServiceSpawnFailed")


@dataclass
class ServiceState:
    phase: Phase = Phase.DOWNLOADING
    events: list[Event] = field(default_factory=list)
    copies: dict[str, ReplicaInfo] = field(default_factory=dict)
    desired: int = 1
    next_copy: int = 0
    replaced_failures: int = 0
    # Self-healing pools ("pool-self-healing"): how the copies that failed since one was last ready ended,
    # how many of them were placed again, and until when the next replacement waits (back-off).
    failure_streak: list[str] = field(default_factory=list)
    streak_replaced: int = 0
    replace_paused_until: datetime | None = None
    last_error: str | None = None
    weights: WeightsResult | None = None
    stop_requested: bool = False
    finished: dict[str, CopyResult] = field(default_factory=dict)
    draining: list[str] = field(default_factory=list)  # copies being scaled in (no new requests)
    service_ready: bool = False  # the endpoint's own service (LiteLLM) is live and routed to
    service_restarts: int = 0


@workflow.defn
class ServiceWorkflow:
    def __init__(self) -> None:
        self.state = ServiceState()
        self.input: ServiceInput | None = None
        self._service_stopping = False
        self._service_failed: str | None = None  # a service's fatal configuration error ends the workflow

    # --- reads and writes from outside ---------------------------------------------------------
    @workflow.query
    def status(self) -> ServiceStatus:
        assert self.input is not None
        return ServiceStatus(
            workflow_id=self.input.workflow_id, phase=self.state.phase, desired_replicas=self.state.desired,
            replicas=tuple(self.state.copies.values()), events=tuple(self.state.events),
            last_error=self.state.last_error, weights=self.state.weights,
        )

    @workflow.signal
    def stop(self, request: StopRequest | None = None) -> None:
        # Histories from before a stop carried its request replay their bare stops as stops.
        if request is None and workflow.patched("stop-request"):
            refuse_signal("stop")
            return
        if not self.state.stop_requested:
            self.state.stop_requested = True
            self._event("stop_requested", "stop requested")

    @workflow.update
    def scale(self, request: ScaleRequest) -> ScaleResult:
        """Set the pool's desired size (manual, autoscaler); the pool loop starts or drains copies."""
        previous = self.state.desired
        self.state.desired = request.replicas
        if request.replicas != previous:
            why = f" ({request.reason})" if request.reason else ""
            verb = "scale_up" if request.replicas > previous else "scale_down"
            self._event(verb, f"{request.source}: {previous} → {request.replicas} copies{why}")
            self._update_phase()
        return ScaleResult(previous=previous, desired=request.replicas,
                           message=f"desired copies {previous} → {request.replicas}")

    @scale.validator
    def _check_scale(self, request: ScaleRequest) -> None:
        assert self.input is not None
        if self.input.definition.replica is None:
            raise ApplicationError("This workflow runs a service, not a replica pool; it cannot be scaled.")
        if self.state.stop_requested or self.state.phase in Phase.terminal():
            raise ApplicationError("The workflow is stopping; it cannot be scaled.")
        pool = self.input.definition.pool
        if request.replicas > pool.max_replicas:
            raise ApplicationError(
                f"Cannot scale to {request.replicas} copies: MaxReplicas is {pool.max_replicas}.")
        if request.replicas < pool.min_replicas:
            raise ApplicationError(
                f"Cannot scale to {request.replicas} copies: MinReplicas is {pool.min_replicas}.")

    @workflow.signal
    def wake(self, reason: str | None = None) -> None:
        """A request reached the pool while it had no copy: bring one up (a no-op when copies exist)."""
        if reason is None:
            refuse_signal("wake")
            return
        if self.state.stop_requested or self.state.desired > 0 or self.input is None:
            return
        if self.input.definition.replica is None:
            return
        self.state.desired = 1
        self._event("woken", f"0 → 1 copy: {reason or 'a request arrived'}")
        self._update_phase()

    @workflow.signal
    def copy_event(self, event: Event | None = None) -> None:
        if event is None:
            refuse_signal("copy_event")
            return
        self._append(event)

    @workflow.signal
    def copy_state(self, info: ReplicaInfo | None = None) -> None:
        if info is None:
            refuse_signal("copy_state")
            return
        before = self.state.copies.get(info.copy_id)
        if info.copy_id in self.state.copies or not self.state.stop_requested:
            self.state.copies[info.copy_id] = info
        became_ready = info.status is CopyStatus.READY and (before is None or before.status is not CopyStatus.READY)
        if became_ready:  # a copy serves: whatever failed before was not the model
            self.state.failure_streak.clear()
            self.state.streak_replaced = 0
        self._update_phase()

    # --- helpers --------------------------------------------------------------------------------
    def _append(self, event: Event) -> None:
        self.state.events.append(event)
        del self.state.events[:-MAX_EVENTS]

    def _event(self, kind: str, message: str, copy_id: str | None = None) -> None:
        self._append(Event(at=workflow.now(), kind=kind, message=message, copy_id=copy_id))

    def _update_phase(self) -> None:
        if self.state.phase in (Phase.DOWNLOADING, Phase.STOPPING) or self.state.phase in Phase.terminal():
            return
        if self.input is not None and self.input.definition.replica is None:
            # A service entry (gateway, OpenCode) has no pool: its one server is the whole workflow.
            self.state.phase = Phase.READY if self.state.service_ready else Phase.STARTING
            return
        statuses = {c.status for c in self.state.copies.values()}
        # Ready means a client can be served: behind a LiteLLM proxy, that needs the proxy too.
        fronted = self.input is not None and _fronted(self.input)
        if CopyStatus.READY in statuses and (self.state.service_ready or not fronted):
            self.state.phase = Phase.READY
        elif CopyStatus.READY in statuses:
            self.state.phase = Phase.STARTING
        elif CopyStatus.STARTING in statuses:
            self.state.phase = Phase.STARTING
        elif self.state.desired == 0:
            self.state.phase = Phase.SCALED_TO_ZERO
        else:
            self.state.phase = Phase.SCHEDULING

    # --- the run --------------------------------------------------------------------------------
    @workflow.run
    async def run(self, input: ServiceInput) -> ServiceStatus:
        self.input = input
        try:
            await require_authorized("verify_service_input", input)
        except ApplicationError as error:
            self.state.last_error = error.message
            self.state.phase = Phase.FAILED
            raise
        definition = input.definition
        self._event("submitted", f"{definition.entry} submitted by {input.owner.user}")
        model_dir = ""
        # The proxy starts at once: its 6–12 s start overlaps the download and the ranks' start.
        service = asyncio.create_task(self._proxy_service(input)) if _fronted(input) else None
        if definition.service is not None and definition.replica is None:
            # A service entry (gateway, OpenCode): its one server is the whole workflow.
            self.state.phase = Phase.STARTING
            self.state.desired = 0
            service = asyncio.create_task(self._proxy_service(input))
        try:
            if definition.weights is not None and not self.state.stop_requested:
                model_dir = await self._download(input)
            if definition.replica is not None and not self.state.stop_requested:
                self.state.desired = max(definition.pool.min_replicas, 1)
                self.state.phase = Phase.SCHEDULING
                await self._hold_pool(input, model_dir)
            elif definition.service is not None:
                await workflow.wait_condition(lambda: self.state.stop_requested or self._service_failed is not None)
                if self._service_failed is not None:
                    raise ApplicationError(self._service_failed, type="ServiceFailed", non_retryable=True)
                self.state.phase = Phase.STOPPING
        except ApplicationError as error:
            self.state.last_error = error.message
            self._event("failed", error.message)
            await self._stop_service(service)
            await self._cleanup(input)
            self.state.phase = Phase.FAILED
            raise
        await self._stop_service(service)
        await self._cleanup(input)
        self.state.phase = Phase.STOPPED
        self._event("stopped", "every rank stopped, GPUs released, endpoint removed")
        return self.status()

    async def _download(self, input: ServiceInput) -> str:
        job = input.definition.weights
        assert job is not None
        self.state.phase = Phase.DOWNLOADING
        where = f"persistent volume {job.volume}" if job.volume else "an ephemeral volume"
        self._event("downloading", f"downloading {job.repo}@{job.revision or 'main'} into {where}")
        download = workflow.start_activity(
            "download_weights", WeightsInput(workflow_id=input.workflow_id, job=job, owner=input.owner.user),
            result_type=WeightsResult, task_queue=NODES_TASK_QUEUE, start_to_close_timeout=timedelta(hours=12),
            heartbeat_timeout=timedelta(seconds=60), retry_policy=DOWNLOAD_RETRY,
        )
        await workflow.wait_condition(lambda: download.done() or self.state.stop_requested)
        if not download.done():
            download.cancel()
            await workflow.wait([download])
            return ""
        try:
            result = download.result()
        except ActivityError as error:
            cause = error.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
            raise ApplicationError(f"downloading weights failed: {message}", non_retryable=True) from None
        self.state.weights = result
        if result.dry_run:
            note = "dry run: the simulator needs no weights"
        elif result.cache_hit:
            note = f"cache hit: {job.repo} already on the volume, 0 bytes transferred"
        else:
            note = f"downloaded {result.bytes_transferred / 1e6:.1f} MB"
        self._event("downloaded", note)
        self.state.phase = Phase.SCHEDULING
        return result.model_dir

    def _copy_input(self, input: ServiceInput, model_dir: str) -> CopyInput:
        replica = input.definition.replica
        assert replica is not None
        index = self.state.next_copy
        self.state.next_copy += 1
        weights = input.definition.weights
        return CopyInput(
            workflow_id=input.workflow_id, endpoint_id=input.endpoint_id,
            copy_id=f"{input.workflow_id}.copy-{index}", copy_index=index, engine=replica.engine,
            nodes=replica.nodes, gpus_per_node=replica.gpus_per_node, gpu_memory_gb=replica.gpu_memory_gb,
            model_dir=model_dir, volume=weights.volume if weights else None,
            parent_workflow_id=workflow.info().workflow_id, timings=input.timings,
        )

    async def _run_copy(self, copy: CopyInput) -> None:
        self.state.copies[copy.copy_id] = ReplicaInfo(copy_id=copy.copy_id, status=CopyStatus.SCHEDULING)
        try:
            result: CopyResult = await workflow.execute_child_workflow(
                CopyWorkflow.run, copy, id=copy.copy_id,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
            )
        except ChildWorkflowError as error:
            result = CopyResult(copy_id=copy.copy_id, status=CopyStatus.FAILED, message=str(error.cause or error))
        self.state.finished[copy.copy_id] = result
        self.state.copies.pop(copy.copy_id, None)
        self._update_phase()

    async def _hold_pool(self, input: ServiceInput, model_dir: str) -> None:
        pool = input.definition.pool
        running: dict[str, asyncio.Task[None]] = {}
        drains: list[asyncio.Task[None]] = []

        # Histories recorded before pools healed themselves never re-place with back-off.
        healing = workflow.patched("pool-self-healing")

        def active() -> int:  # copies that count toward the desired size (not being drained)
            return len(running) - sum(1 for c in running if c in self.state.draining)

        while True:
            pause = self._replace_pause()
            while not self.state.stop_requested and active() < self.state.desired and pause is None:
                copy = self._copy_input(input, model_dir)
                running[copy.copy_id] = asyncio.create_task(self._run_copy(copy))
                self._update_phase()
            if not self.state.stop_requested and active() > self.state.desired:
                for copy_id in self._scale_in_order(running, active() - self.state.desired):
                    self.state.draining.append(copy_id)
                    drains.append(asyncio.create_task(self._drain(copy_id, running, pool.drain_grace_s)))
            with contextlib.suppress(asyncio.TimeoutError):  # the back-off ran out: place the replacement
                await workflow.wait_condition(
                    lambda paused=pause is not None: self.state.stop_requested or bool(self.state.finished)
                    or active() > self.state.desired or (active() < self.state.desired and not paused),
                    timeout=pause,
                )
            if self.state.stop_requested:
                self.state.phase = Phase.STOPPING
                for drain in drains:
                    drain.cancel()
                for task in running.values():
                    task.cancel()  # cancels the child workflow: it stops its ranks and releases GPUs
                if running:  # workflow.wait refuses an empty list (e.g. a pool scaled to zero)
                    await workflow.wait(list(running.values()))
                return
            for copy_id, result in list(self.state.finished.items()):
                del self.state.finished[copy_id]
                running.pop(copy_id, None)
                if copy_id in self.state.draining:
                    continue  # scaled in on purpose: its end is the drain's business
                try:
                    if healing:
                        self._on_copy_failed(result, len(running), input)
                    else:
                        self._on_copy_finished(result, len(running), pool.min_replicas, pool.replace_failed_copies)
                    self._update_phase()  # e.g. dropped to zero copies
                except ApplicationError:
                    self.state.phase = Phase.STOPPING
                    for task in running.values():
                        task.cancel()
                    if running:  # workflow.wait refuses an empty list
                        await workflow.wait(list(running.values()))
                    raise

    def _scale_in_order(self, running: dict[str, asyncio.Task[None]], count: int) -> list[str]:
        """Which copies to scale in: ones not yet serving first (nothing to drain), then the newest."""
        candidates = [c for c in running if c not in self.state.draining]
        serving = {c for c, info in self.state.copies.items() if info.status is CopyStatus.READY}
        candidates.sort(key=lambda c: (c in serving, -int(c.rsplit("-", 1)[-1])))
        return candidates[:count]

    async def _drain(self, copy_id: str, running: dict[str, asyncio.Task[None]], grace_s: float) -> None:
        """Scale one copy in: no new requests, in-flight ones finish (up to the grace), then stop it."""
        info = self.state.copies.get(copy_id)
        task = running.get(copy_id)
        try:
            if info is not None and info.status is CopyStatus.READY:
                self._event("copy_draining", f"{copy_id} takes no new requests; in-flight ones get "
                            f"up to {grace_s:.0f} s", copy_id)
                result: DrainResult = await workflow.execute_activity(
                    "drain_replica", DrainInput(copy_id=copy_id, url=info.url, grace_s=grace_s),
                    result_type=DrainResult, task_queue=CONTROL_TASK_QUEUE,
                    start_to_close_timeout=timedelta(seconds=grace_s + 60),
                )
                note = (f"in-flight requests finished in {result.waited_s:.1f} s" if result.drained
                        else f"grace of {grace_s:.0f} s ran out with requests still in flight")
                self._event("copy_drained", f"{copy_id}: {note}; stopping it", copy_id)
            if task is not None and not task.done():
                task.cancel()  # cancels the child workflow: it stops its ranks and releases its GPUs
                await workflow.wait([task])
        finally:
            running.pop(copy_id, None)
            self.state.copies.pop(copy_id, None)
            if copy_id in self.state.draining:
                self.state.draining.remove(copy_id)
            self._update_phase()

    def _on_copy_finished(self, result: CopyResult, remaining: int, minimum: int, replace_budget: int) -> None:
        if result.status is CopyStatus.INTERRUPTED:
            self._event("copy_interrupted", f"{result.copy_id}: {result.message}; placing it again", result.copy_id)
            return  # desired unchanged: the loop places a fresh copy
        if result.status is not CopyStatus.FAILED:
            return
        self.state.last_error = f"{result.copy_id}: {result.message}"
        self._event("copy_failed", result.message, result.copy_id)
        if self.state.replaced_failures < replace_budget:
            self.state.replaced_failures += 1
            self._event("copy_replaced", f"re-placing {result.copy_id} "
                        f"({self.state.replaced_failures} of ReplaceFailedCopies={replace_budget})")
            return
        if remaining >= minimum:  # the pool was above its minimum: drop the copy
            self.state.desired = remaining
            self._event("copy_dropped", f"{result.copy_id} dropped; the pool was above its minimum "
                        f"({remaining + 1} > MinReplicas={minimum}); a later scale-up replaces it")
            return
        raise ApplicationError(f"a copy failed at the pool minimum ({minimum}): {result.message}",
                               type="CopyFailed", non_retryable=True)

    def _replace_pause(self) -> timedelta | None:
        """How long a replacement still waits (its back-off), or None when it may be placed now."""
        until = self.state.replace_paused_until
        if until is None or until <= workflow.now():
            self.state.replace_paused_until = None
            return None
        return until - workflow.now()

    def _on_copy_failed(self, result: CopyResult, remaining: int, input: ServiceInput) -> None:
        """A self-healing pool: re-place a failed copy (bounded, with back-off) while the other copies serve;
        fail the workflow only when the model itself keeps failing or the pool is spent at its minimum."""
        if result.status is not CopyStatus.FAILED:
            self._on_copy_finished(result, remaining, 0, 0)  # interrupted: placed again; stopped: nothing
            return
        self.state.last_error = f"{result.copy_id}: {result.message}"
        self._event("copy_failed", result.message, result.copy_id)
        exit_info = result.failure
        streak = self.state.failure_streak
        streak.append(failure_signature(exit_info.reason, exit_info.exit_code, exit_info.signal)
                      if exit_info is not None else "never-ready")
        del streak[:-SAME_FAILURES_TO_FAIL]
        pool, timings = input.definition.pool, input.timings
        pacing = Pacing(pool.replace_failed_copies, timings.replace_backoff_s, timings.replace_backoff_max_s)
        decision = decide(streak, self.state.streak_replaced, pacing, remaining, pool.min_replicas, result.message)
        if decision.verdict is Verdict.REPLACE:
            self.state.streak_replaced += 1
            self.state.replaced_failures += 1
            self.state.replace_paused_until = workflow.now() + timedelta(seconds=decision.backoff_s)
            self._event("copy_replaced", f"{result.copy_id}: {decision.reason}", result.copy_id)
        elif decision.verdict is Verdict.DROP:
            self.state.desired = remaining
            self._event("copy_dropped", f"{result.copy_id} {decision.reason}", result.copy_id)
        else:
            raise ApplicationError(decision.reason, type="CopyFailed", non_retryable=True)

    # --- the endpoint's service (the per-model LiteLLM proxy) -------------------------------------
    async def _proxy_service(self, input: ServiceInput) -> None:
        """Place, start and keep the LiteLLM proxy: once live, the endpoint routes to it; if it exits,
        the endpoint stops routing to it and it is started again with back-off; stopped with the
        workflow. The master key travels as a literal only inside this (encrypted) history, or as an
        ApiKeySecret reference resolved on the node."""
        owner = f"{input.workflow_id}.{_service_name(input)}"
        backoff = 1.0
        try:
            while not self._stopping_service():
                port: ServicePort = await workflow.execute_activity(
                    "reserve_service_port", ServicePortRequest(workflow_id=input.workflow_id, owner=owner),
                    result_type=ServicePort, task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
                    retry_policy=CONTROL_RETRY,
                )
                run = self._service_run(input, port)
                started = workflow.now()
                exit_message = await self._service_life(input, run, port)
                if (workflow.now() - started).total_seconds() >= SERVICE_BACKOFF_RESET_S:
                    backoff = 1.0
                if self._stopping_service():
                    return
                self.state.last_error = exit_message
                if self._service_failed is not None:
                    self._event("service_failed", exit_message)
                    return
                self.state.service_restarts += 1
                self._event("service_exited", f"{exit_message}; restarting it in {backoff:.0f} s")
                with contextlib.suppress(asyncio.TimeoutError):  # the back-off ran out: start it again
                    await workflow.wait_condition(self._stopping_service, timeout=timedelta(seconds=backoff))
                backoff = min(backoff * 2, SERVICE_BACKOFF_MAX_S)
        finally:
            await workflow.execute_activity(
                "release_placement", owner, task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
                retry_policy=CONTROL_RETRY,
            )

    def _service_run(self, input: ServiceInput, port: ServicePort) -> ServiceRun:
        definition = input.definition
        common = {"workflow_id": input.workflow_id, "endpoint_id": input.endpoint_id, "owner": input.owner.user,
                  "address": port.address, "port": port.port, "api_key_secret": definition.api_key_secret}
        if definition.service is not None and definition.replica is None:
            options = {k: str(v) for k, v in definition.service.options.items() if v is not None and k != "password"}
            if definition.service.volume:
                options["volume"] = definition.service.volume  # OpenCode's workspace outlives the workflow
            # The gateway's master key when generated (MasterKeySecret is resolved on the node instead).
            master_key = definition.api_key if definition.service.kind == "gateway" and \
                not definition.api_key_secret else None
            return ServiceRun(name=definition.service.kind, kind=definition.service.kind, options=options,
                              password=str(definition.service.options.get("password") or "") or None,
                              endpoint_url=input.endpoint_url, api_key=master_key, **common)
        replica = definition.replica
        assert replica is not None
        return ServiceRun(
            name=PROXY_SERVICE, kind=PROXY_SERVICE,
            options={"model_name": definition.model_id or replica.engine.served_model_name,
                     "served_model_name": replica.engine.served_model_name},
            api_key=None if definition.api_key_secret else definition.api_key, **common,
        )

    async def _service_life(self, input: ServiceInput, run: ServiceRun, port: ServicePort) -> str:
        """One run of the service; returns why it ended (empty when stopped on request). The process
        outlives its node agent: when the agent goes silent, a restarted one is asked to adopt it, and
        the endpoint keeps routing to it meanwhile."""
        timings = input.timings
        process = start_supervised("run_service", run, ServiceExit, port.node_id, timings, adopting=False)
        live = workflow.start_activity(
            "wait_live", _live_check(run), result_type=float, task_queue=node_task_queue(port.node_id),
            start_to_close_timeout=timedelta(seconds=240),
            heartbeat_timeout=timedelta(seconds=timings.rank_heartbeat_timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=["NotReady"]),
        )
        routed = False
        adoptions = 0

        def settled() -> bool:  # the process ended, the probe answered (once), or the workflow stops
            return process.done() or (live.done() and not routed) or self._stopping_service()

        try:
            while True:
                await workflow.wait_condition(settled)
                if self._stopping_service():
                    break
                if not process.done():  # the liveness probe answered first
                    if live.exception() is not None:  # up but never live: stop it, and start it again
                        process.cancel()
                        await workflow.wait([process])
                        return f"service {run.name} on {port.node_id} never became live: {live.exception()}"
                    await self._route_service(input, run.url)
                    routed = True
                    self._event("service_ready", f"{run.name} live at {run.url} on {port.node_id} "
                                f"after {live.result():.1f} s; the endpoint routes to it")
                    continue
                if not agent_went_silent(process.exception()) or adoptions >= MAX_ADOPTIONS:
                    break
                # Histories recorded before services could be adopted restarted the service here.
                if not workflow.patched("service-adoption"):
                    break
                adoptions += 1
                self._event("service_unresponsive",
                            f"node agent of {port.node_id} stopped answering for {run.name}; the service keeps "
                            f"running and a restarted agent has {timings.rank_adopt_window_s:.0f} s to adopt it")
                process = start_supervised("adopt_service", run, ServiceExit, port.node_id, timings, adopting=True)
        finally:
            if routed:
                await self._route_service(input, None)
            for task in (live, process):
                if not task.done():
                    task.cancel()
            await workflow.wait([live, process])
        if self._stopping_service():
            return ""
        try:
            result = process.result()
        except ActivityError as error:
            cause = error.cause
            if not_adopted(error):
                return (f"service {run.name} on {port.node_id} was lost (its node agent stopped answering): "
                        f"no node agent on {port.node_id} adopted it within {timings.rank_adopt_window_s:.0f} s")
            message = f"service {run.name} on {port.node_id} failed: " + (
                cause.message if isinstance(cause, ApplicationError) else str(cause or error))
            if isinstance(cause, ApplicationError) and cause.non_retryable and cause.type in FATAL_SERVICE_ERRORS:
                self._service_failed = message  # restarting cannot help: bad settings, say which and why
            return message
        return result.describe() + (f"; last lines of its log:\n{result.log_tail}" if result.log_tail else "")

    async def _route_service(self, input: ServiceInput, url: str | None) -> None:
        await workflow.execute_activity(
            "set_endpoint_service",
            EndpointService(endpoint_id=input.endpoint_id, service=_service_name(input), url=url),
            task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT, retry_policy=CONTROL_RETRY,
        )
        self.state.service_ready = url is not None
        self._update_phase()

    def _stopping_service(self) -> bool:
        return self._service_stopping or self.state.stop_requested

    async def _stop_service(self, service: asyncio.Task[None] | None) -> None:
        self._service_stopping = True
        if service is not None:
            await workflow.wait([service])
            if not service.cancelled() and service.exception() is not None:
                workflow.logger.warning("the endpoint's service ended with %s", service.exception())

    async def _cleanup(self, input: ServiceInput) -> None:
        await workflow.execute_activity(
            "remove_endpoint", CleanupInput(workflow_id=input.workflow_id, endpoint_id=input.endpoint_id),
            task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
        )
        weights, service = input.definition.weights, input.definition.service
        if (weights is not None and not weights.volume) or (
                service is not None and input.definition.replica is None and not service.volume):
            await workflow.execute_activity(
                "delete_ephemeral_volume", input.workflow_id, task_queue=NODES_TASK_QUEUE,
                start_to_close_timeout=timedelta(minutes=10),
            )


def _fronted(input: ServiceInput) -> bool:
    """A replica pool with `Proxy=true`: its endpoint is a LiteLLM proxy run by this workflow."""
    return input.definition.proxy and input.definition.replica is not None


def _service_name(input: ServiceInput) -> str:
    service = input.definition.service
    return service.kind if service is not None and input.definition.replica is None else PROXY_SERVICE


def _live_check(run: ServiceRun) -> LiveCheck:
    if run.kind == "gateway":
        return LiveCheck(url=run.url, path="/health")
    if run.kind == "opencode":
        return LiveCheck(url=run.url, path="/session", unauthorized_is_live=True)
    return LiveCheck(url=run.url)
