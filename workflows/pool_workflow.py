"""PoolWorkflow (Temporal type name ServiceWorkflow): the one generic workflow every catalog entry runs —
weights, then a pool of copies (child CopyWorkflows) behind the endpoint's front process (a child
FrontWorkflow), until stopped or failed; it continues as new when its history grows long, its children running on.

The thin shell of the pool entity: its handlers and its run. The state is one model (PoolState); what to do is
decided by pure functions (pool_size, drain, placement, healing, rollout_plan, front_restart, pool_phase) and
carried out by plain helpers it composes: CopyPool (workflows/pool.py, the copies and continue-as-new),
RolloutDriver (workflows/rollout.py), FrontLink (workflows/front_link.py) and workflows/pool_model.py."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import Rollout, RolloutCommand
    from berth.settings import CONTROL_TASK_QUEUE, NODES_TASK_QUEUE
    from workflows import activity_stubs as stubs
    from workflows.authorized import refuse_signal, require_authorized
    from workflows.front_link import FrontLink
    from workflows.model_payloads import ModelUpdate
    from workflows.payloads import (
        CleanupInput,
        CopyInfo,
        CopyResult,
        CopyStatus,
        Event,
        FrontReport,
        Phase,
        PoolInput,
        PoolStatus,
        ScaleRequest,
        ScaleResult,
        StopRequest,
        WeightsInput,
    )
    from workflows.pool import CopyPool
    from workflows.pool_model import acquire_model, release_model
    from workflows.pool_phase import update_phase
    from workflows.pool_state import PoolState
    from workflows.rollout import RolloutDriver
    from workflows.rollout_payloads import MoveRequest, RolloutRequest

DOWNLOAD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=30), maximum_attempts=5,
    non_retryable_error_types=["GatedModel", "ModelNotFound", "RevisionNotFound", "VolumeFull", "HubRequest",
                               "WeightsError", "SecretError"],
)
SHORT = timedelta(seconds=60)


@workflow.defn(name="ServiceWorkflow")  # the type name running pools and their histories carry
class PoolWorkflow:
    @workflow.init
    def __init__(self, input: PoolInput) -> None:
        # The input (and a carried pool) before any handler runs: a continued run may take an update or a
        # signal in its first workflow task, before `run` starts.
        continued = input.carry is not None and workflow.info().continued_run_id is not None
        self.state = PoolState.carried(input.carry) if input.carry is not None and continued else PoolState()
        self.state.input = input.model_copy(update={"carry": None})
        self.state.continued_run = continued
        self.front = FrontLink(self.state)
        self.rollout = RolloutDriver(self.state)
        self.pool = CopyPool(self.state, self.rollout)

    # --- reads and writes from outside ---------------------------------------------------------
    @workflow.query
    def status(self) -> PoolStatus:
        assert self.state.input is not None
        return PoolStatus(
            workflow_id=self.state.input.workflow_id, phase=self.state.phase, desired_copies=self.state.desired,
            copies=tuple(self.state.copies.values()), events=tuple(self.state.events),
            last_error=self.state.last_error, weights=self.state.weights, revision=self.state.revision,
            rollout=self.state.rollout, rolled_back=tuple(self.state.rolled_back),
        )

    @workflow.signal
    def stop(self, request: StopRequest | None = None) -> None:
        # Histories from before a stop carried its request replay their bare stops as stops.
        if request is None and workflow.patched("stop-request"):
            refuse_signal("stop")
            return
        if not self.state.stop_requested:
            self.state.stop_requested = True
            self.state.event("stop_requested", "stop requested")

    @workflow.update
    def scale(self, request: ScaleRequest) -> ScaleResult:
        """Set the pool's desired size (manual, autoscaler); the pool loop starts or drains copies."""
        previous = self.state.desired
        self.state.desired = request.replicas
        if request.grace_s is not None:
            self.state.next_grace_s = request.grace_s  # the drains this scale-in starts (`berth workflow drain`)
            self.state.nudge()
        if request.replicas != previous:
            why = f" ({request.reason})" if request.reason else ""
            verb = "scale_up" if request.replicas > previous else "scale_down"
            self.state.event(verb, f"{request.source}: {previous} → {request.replicas} copies{why}")
            update_phase(self.state)
        return ScaleResult(previous=previous, desired=request.replicas,
                           message=f"desired copies {previous} → {request.replicas}")

    @scale.validator
    def _check_scale(self, request: ScaleRequest) -> None:
        assert self.state.input is not None
        if self.state.input.definition.replica is None:
            raise ApplicationError("This workflow runs a service, not a replica pool; it cannot be scaled.")
        if self.state.stop_requested or self.state.phase in Phase.terminal():
            raise ApplicationError("The workflow is stopping; it cannot be scaled.")
        pool = self.state.input.definition.pool
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
        if self.state.stop_requested or self.state.desired > 0 or self.state.input is None:
            return
        if self.state.input.definition.replica is None:
            return
        self.state.desired = 1
        self.state.event("woken", f"0 → 1 copy: {reason or 'a request arrived'}")
        update_phase(self.state)

    @workflow.signal
    def copy_event(self, event: Event | None = None) -> None:
        if event is None:
            refuse_signal("copy_event")
            return
        self.state.append(event)

    @workflow.signal
    def copy_state(self, info: CopyInfo | None = None) -> None:
        if info is None:
            refuse_signal("copy_state")
            return
        before = self.state.copies.get(info.copy_id)
        if info.copy_id in self.state.copies or not self.state.stop_requested:
            self.state.copies[info.copy_id] = info
        became_ready = info.status is CopyStatus.READY and (before is None or before.status is not CopyStatus.READY)
        if became_ready and info.copy_id in self.state.copies:
            self.state.ready_since[info.copy_id] = workflow.now()  # a rollout counts it once ready MinReady
            self.state.nudge()
        if became_ready:  # a copy serves: whatever failed before was not the model
            self.state.failure_streak.clear()
            self.state.streak_replaced = 0
        update_phase(self.state)

    @workflow.signal
    def copy_finished(self, result: CopyResult | None = None) -> None:
        """A copy's last word: how a copy started by an earlier run of this workflow ended."""
        if result is None:
            refuse_signal("copy_finished")
            return
        self.state.reported[result.copy_id] = result

    @workflow.signal
    def model_update(self, update: ModelUpdate | None = None) -> None:
        """A step of the model job this pool waits for (workflows/pool_model.py)."""
        if update is None:
            refuse_signal("model_update")
            return
        self.state.model_news = update

    @workflow.signal
    def front_report(self, report: FrontReport | None = None) -> None:
        if report is None:
            refuse_signal("front_report")
            return
        self.front.apply_report(report)

    @workflow.update
    async def roll_to(self, request: RolloutRequest) -> Rollout:
        """Start rolling to revision N+1 (signed by the API, like a start)."""
        await require_authorized(stubs.verify_service_input, request.input)
        return self.rollout.begin(request)

    @roll_to.validator
    def _check_roll_to(self, request: RolloutRequest) -> None:
        self.rollout.check_roll_to(request)

    @workflow.update
    def rollout_command(self, command: RolloutCommand) -> Rollout:
        return self.rollout.command(command)

    @rollout_command.validator
    def _check_command(self, command: RolloutCommand) -> None:
        self.rollout.check_command(command)

    @workflow.update
    def move_copies(self, request: MoveRequest) -> int:
        """Copies on a drained node: each is replaced elsewhere and drained with the grace."""
        return self.pool.move(request)

    # --- the run --------------------------------------------------------------------------------
    @workflow.run
    async def run(self, input: PoolInput) -> PoolStatus:
        # Only a run this workflow continued itself resumes a carried state (and was authorized then).
        carry, continued = input.carry, self.state.continued_run
        input = input.model_copy(update={"carry": None})  # what self.state.input holds
        definition = input.definition
        if carry is not None and continued:
            front = self.front.attach(carry.front_id) if carry.front_id else None
            model_dir = carry.model_dir
        else:
            await self._authorize(input)
            self.state.revision = input.revision  # 1, or the latest revision of a restored workflow
            self.state.event("submitted", f"{definition.entry} submitted by {input.owner.user}")
            front, model_dir = self.front.begin(input), ""
        try:
            if definition.weights is not None and not self.state.stop_requested and not continued:
                model_dir = await self._download(input)
            if definition.model_ref and not self.state.stop_requested and not continued:
                model_dir = await acquire_model(self.state, input)
            if definition.replica is not None and not self.state.stop_requested:
                if not continued:
                    self.state.desired = max(definition.pool.min_replicas, 1)
                    self.state.phase = Phase.SCHEDULING
                await self.pool.hold(input, model_dir)
            elif definition.service is not None:
                await workflow.wait_condition(lambda: self.state.stop_requested or self.front.failed() is not None)
                failed = self.front.failed()
                if failed is not None:
                    raise ApplicationError(failed, type="ServiceFailed", non_retryable=True)
                self.state.phase = Phase.STOPPING
        except ApplicationError as error:
            self.state.last_error = error.message
            self.state.event("failed", error.message)
            await self.front.stop(front)
            await self._cleanup(input)
            self.state.phase = Phase.FAILED
            raise
        await self.front.stop(front)
        await self._cleanup(input)
        self.state.phase = Phase.STOPPED
        self.state.event("stopped", "every rank stopped, GPUs released, endpoint removed")
        return self.status()

    async def _authorize(self, input: PoolInput) -> None:
        try:
            await require_authorized(stubs.verify_service_input, input)
        except ApplicationError as error:
            self.state.last_error = error.message
            self.state.phase = Phase.FAILED
            raise

    async def _download(self, input: PoolInput) -> str:
        job = input.definition.weights
        assert job is not None
        self.state.phase = Phase.DOWNLOADING
        where = f"persistent volume {job.volume}" if job.volume else "an ephemeral volume"
        self.state.event("downloading", f"downloading {job.repo}@{job.revision or 'main'} into {where}")
        download = workflow.start_activity(
            stubs.download_weights, WeightsInput(workflow_id=input.workflow_id, job=job, owner=input.owner.user),
            task_queue=NODES_TASK_QUEUE, start_to_close_timeout=timedelta(hours=12),
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
        self.state.event("downloaded", note)
        self.state.phase = Phase.SCHEDULING
        return result.model_dir

    async def _cleanup(self, input: PoolInput) -> None:
        await workflow.execute_activity(
            stubs.remove_endpoint, CleanupInput(workflow_id=input.workflow_id, endpoint_id=input.endpoint_id),
            task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
        )
        # The registry's uses of this workflow (model:// and hf:// registered on first use) end with it, so
        # eviction may take their bytes; histories from before the registry have none to end.
        if input.definition.model_ref or (input.definition.weights is not None and workflow.patched("model-registry")):
            await release_model(input)
        weights, service = input.definition.weights, input.definition.service
        if (weights is not None and not weights.volume) or (
                service is not None and input.definition.replica is None and not service.volume):
            await workflow.execute_activity(
                stubs.delete_ephemeral_volume, input.workflow_id, task_queue=NODES_TASK_QUEUE,
                start_to_close_timeout=timedelta(minutes=10),
            )


__all__ = ["PoolState", "PoolWorkflow"]
