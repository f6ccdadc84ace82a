"""RolloutDriver: a pool rolls to its next revision (issue 17) — the `roll_to` update hands it the signed
input of revision N+1, `rollout_command` pauses, resumes, promotes or rolls it back, `move_copies` moves
copies off a drained node — and a driver coroutine, durable like the rest of the workflow, that asks the
planner (workflows/rollout_plan.py) for each revision's size and the traffic split, sets the split on the
endpoint, judges a canary from the proxies' counts, and ends the rollout. A restarted worker replays the
history and the driver continues in the phase it was in."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import (
        RevisionHealth,
        Rollout,
        RolloutAction,
        RolloutCommand,
        RolloutKind,
        RolloutPhase,
    )
    from berth.settings import CONTROL_TASK_QUEUE, NODES_TASK_QUEUE
    from workflows import activity_stubs as stubs
    from workflows.payloads import Phase, WeightsInput, WeightsResult
    from workflows.pool_size import rollout_active, side
    from workflows.pool_state import PoolState
    from workflows.rollout_payloads import HealthInput, RolloutRequest, ServeInput, TrafficInput
    from workflows.rollout_plan import Plan, plan

MAX_ROLLED_BACK = 100  # rolled-back revisions a pool remembers (for their listing)
TICK = timedelta(seconds=2)  # the driver looks again this often while a clock runs (min-ready, a hold)
JUDGE_EVERY_S = 5.0  # a canary's health is read this often during a step
CONTROL = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10),
                      maximum_attempts=20)


class RolloutDriver:
    """The rollout's half of a PoolWorkflow: its updates' bodies (the workflow's handlers call them) and the
    driver coroutine."""

    def __init__(self, state: PoolState) -> None:
        self.state = state
        self._driver: asyncio.Task[None] | None = None  # a runtime handle (replays rebuild it), not state

    # --- reads -----------------------------------------------------------------------------------------
    # --- the updates -----------------------------------------------------------------------------------
    def begin(self, request: RolloutRequest) -> Rollout:
        """Start rolling to revision N+1 (`roll_to`, once its signed input was verified)."""
        if rollout_active(self.state):  # another update won the race meanwhile
            raise ApplicationError("A rollout began meanwhile; try again once it ends.")
        now = workflow.now()
        self.state.target = request.input.model_copy(update={"carry": None})
        self.state.target_model_dir, self.state.target_weights = "", None
        same_weights = request.input.definition.weights == self.state.serving().definition.weights
        self.state.rollout = Rollout(
            from_revision=self.state.revision, to_revision=request.revision, strategy=request.strategy,
            phase=RolloutPhase.ROLLING if same_weights else RolloutPhase.PREPARING, by=request.by,
            started_at=now, updated_at=now, message="starting")
        for copy_id in self.state.copies:
            self.state.revision_of.setdefault(copy_id, self.state.revision)
        self.state.want = None
        self.state.event("rollout_started", f"{request.by or 'someone'}: revision {self.state.revision} → "
                         f"{request.revision} ({request.strategy.kind.value})")
        self.state.nudge()
        return self.state.rollout

    def check_roll_to(self, request: RolloutRequest) -> None:
        serving = self.state.serving()
        if serving.definition.replica is None:
            raise ApplicationError("Only a replica pool rolls to a new revision; stop and start a service.")
        if self.state.stop_requested or self.state.phase in Phase.terminal():
            raise ApplicationError("The workflow is stopping; it cannot roll to a new revision.")
        rollout = self.state.rollout
        if rollout_active(self.state) and rollout is not None:
            raise ApplicationError(
                f"A rollout to revision {rollout.to_revision} is {rollout.phase.value}; `berth workflow rollout "
                "promote` or `rollback` it first.")
        if request.input.workflow_id != serving.workflow_id or request.input.endpoint_id != serving.endpoint_id:
            raise ApplicationError("The new revision's input names another workflow or endpoint.")
        last = max(self.state.revision, rollout.to_revision if rollout else 0)
        if request.revision <= last:
            raise ApplicationError(f"Revision {request.revision} is not newer than revision {last}.")

    def command(self, command: RolloutCommand) -> Rollout:
        """Pause, resume, promote or roll back the rollout (`rollout_command`)."""
        rollout = self.state.rollout
        assert rollout is not None  # the validator said so
        who = command.by or "someone"
        if command.action is RolloutAction.PAUSE:
            self._pause(f"paused by {who}")
        elif command.action is RolloutAction.RESUME:
            phase = rollout.resume_phase or RolloutPhase.ROLLING
            self._set(phase=phase, paused_reason="", resume_phase=None, step_started_at=None)
            self.state.event("rollout_resumed", f"{who}: rollout to revision {rollout.to_revision} resumed")
        elif command.action is RolloutAction.PROMOTE:
            phase = (rollout.resume_phase if rollout.phase is RolloutPhase.PAUSED else rollout.phase) \
                or RolloutPhase.ROLLING
            self._set(promoted=True, phase=phase, paused_reason="", resume_phase=None)
            self.state.event("rollout_promoted", f"{who}: revision {rollout.to_revision} promoted")
        else:
            self._set(phase=RolloutPhase.ROLLING_BACK, paused_reason="", resume_phase=None)
            self.state.event("rollout_rolling_back", f"{who}: back to revision {rollout.from_revision}")
        self.state.nudge()
        assert self.state.rollout is not None
        return self.state.rollout

    def check_command(self, command: RolloutCommand) -> None:
        rollout = self.state.rollout
        if rollout is None or not rollout_active(self.state):
            raise ApplicationError("No rollout is in progress; start one with `berth workflow update`.")
        phase, action = rollout.phase, command.action
        if phase is RolloutPhase.ROLLING_BACK:
            raise ApplicationError("The rollout is rolling back; it can only finish.")
        if action is RolloutAction.PAUSE and phase is RolloutPhase.PAUSED:
            raise ApplicationError("The rollout is already paused; `resume`, `promote` or `rollback` it.")
        if action is RolloutAction.RESUME and phase is not RolloutPhase.PAUSED:
            raise ApplicationError(f"The rollout is {phase.value}, not paused.")
        if action is RolloutAction.PROMOTE and phase is RolloutPhase.PREPARING:
            raise ApplicationError("The new revision's weights are still being fetched; promote once they are.")

    # --- the driver ------------------------------------------------------------------------------------
    def ensure(self) -> None:
        if rollout_active(self.state) and (self._driver is None or self._driver.done()):
            self._driver = asyncio.create_task(self._drive())

    def stop(self) -> None:
        if self._driver is not None and not self._driver.done():
            self._driver.cancel()

    async def _drive(self) -> None:
        if self.state.rollout is not None and self.state.rollout.phase is RolloutPhase.PREPARING:
            await self._prepare()
        if not self.state.target_model_dir and self.state.target is not None:
            self.state.target_model_dir = self.state.model_dir
        last_judged = 0.0
        while rollout_active(self.state) and not self.state.stop_requested:
            rollout = self.state.rollout
            assert rollout is not None
            now = workflow.now()
            min_ready = rollout.strategy.min_ready_s
            decided = plan(rollout, self.state.desired, side(self.state, rollout.from_revision, min_ready, now),
                           side(self.state, rollout.to_revision, min_ready, now), now)
            self._apply(decided, now)
            await self._send_traffic(decided.traffic if decided.finished is None else None)
            if decided.finished is not None:
                if decided.finished is RolloutPhase.COMPLETE:
                    await self._serve_facts(rollout.to_revision)
                self._finish(decided.finished)
                return
            if self._judging() and now.timestamp() - last_judged >= JUDGE_EVERY_S:
                last_judged = now.timestamp()
                await self._judge()
            self.state.driver_nudged = False
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self.state.driver_nudged or self.state.stop_requested,
                                              timeout=TICK)

    async def _serve_facts(self, revision: int) -> None:
        """The endpoint's facts (sizes, autoscaling, MaxContextSize) follow the serving revision."""
        assert self.state.input is not None
        try:
            await workflow.execute_activity(
                stubs.serve_revision, ServeInput(workflow_id=self.state.input.workflow_id, revision=revision),
                task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=timedelta(seconds=30), retry_policy=CONTROL)
        except ActivityError as error:  # the copies serve the new revision whatever the endpoint row says
            self.state.event("endpoint_facts_stale", f"the endpoint's facts still describe the previous "
                             f"revision: {error.cause or error}")

    def _apply(self, decided: Plan, now: datetime) -> None:
        rollout = self.state.rollout
        assert rollout is not None
        want = (decided.want_old, decided.want_new)
        if want != self.state.want:
            self.state.want = want
            self.state.nudge()  # the pool loop places or drains to the new sizes
        if decided.finished is not None:
            return  # the phase turns once the split is cleared (`_finish`): a reader never sees it early
        update: dict[str, object] = {"phase": decided.phase, "message": decided.message}
        if decided.switch and rollout.switched_at is None:
            update["switched_at"] = now
            self.state.event("traffic_switched", f"all traffic to revision {rollout.to_revision}")
        if decided.step_live:
            update["step_started_at"] = now
            percent = rollout.strategy.steps[rollout.step]
            self.state.event("canary_step", f"{percent} % of traffic to revision {rollout.to_revision}")
        if decided.step_up:
            update.update(step=rollout.step + 1, step_started_at=None)
        update["traffic"] = decided.traffic or {}
        if any(getattr(rollout, k) != v for k, v in update.items()):
            self._set(**update)

    def _set(self, **fields: object) -> None:
        assert self.state.rollout is not None
        self.state.rollout = self.state.rollout.model_copy(update={**fields, "updated_at": workflow.now()})

    def _pause(self, reason: str) -> None:
        rollout = self.state.rollout
        assert rollout is not None
        self._set(phase=RolloutPhase.PAUSED, paused_reason=reason, resume_phase=rollout.phase)
        self.state.event("rollout_paused", reason)

    def _judging(self) -> bool:
        rollout = self.state.rollout
        return rollout is not None and rollout.strategy.kind is RolloutKind.CANARY \
            and rollout.phase is RolloutPhase.SHIFTING and rollout.step_started_at is not None

    async def _judge(self) -> None:
        rollout = self.state.rollout
        assert rollout is not None and rollout.step_started_at is not None and self.state.input is not None
        strategy = rollout.strategy
        health: RevisionHealth = await workflow.execute_activity(
            stubs.revision_health, HealthInput(endpoint_id=self.state.input.endpoint_id, revision=rollout.to_revision,
                                           since=rollout.step_started_at.timestamp()),
            task_queue=CONTROL_TASK_QUEUE,
            start_to_close_timeout=timedelta(seconds=30), retry_policy=CONTROL)
        if not self._judging():
            return  # paused, promoted or rolled back meanwhile
        new, old = rollout.to_revision, rollout.from_revision
        if health.requests >= strategy.min_requests and health.error_rate > strategy.max_error_rate:
            why = (f"revision {new}'s error rate {100 * health.error_rate:.1f} % over {health.requests} requests "
                   f"exceeds {100 * strategy.max_error_rate:g} %")
        elif strategy.max_ttft_ms > 0 and health.ttft_ms is not None and health.ttft_ms > strategy.max_ttft_ms:
            why = (f"revision {new}'s mean time to first token {health.ttft_ms:.0f} ms exceeds "
                   f"{strategy.max_ttft_ms:g} ms")
        else:
            return
        self._pause(f"{why}: paused with all traffic on revision {old}; `berth workflow rollout rollback` "
                    "or `resume`")
        self._set(traffic={old: 100, new: 0})
        await self._send_traffic({old: 100, new: 0})

    async def _send_traffic(self, weights: dict[int, int] | None) -> None:
        if weights == self.state.traffic_set or self.state.input is None:
            return
        await workflow.execute_activity(
            stubs.set_traffic, TrafficInput(endpoint_id=self.state.input.endpoint_id, weights=weights),
            task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=timedelta(seconds=30), retry_policy=CONTROL)
        self.state.traffic_set = weights

    async def _prepare(self) -> None:
        """The new revision's weights, when they differ from the serving revision's."""
        assert self.state.target is not None
        job = self.state.target.definition.weights
        if job is not None:
            self.state.event("rollout_preparing", f"fetching {job.repo}@{job.revision or 'main'} for revision "
                             f"{self.state.rollout.to_revision if self.state.rollout else '?'}")
            try:
                result: WeightsResult = await workflow.execute_activity(
                    stubs.download_weights, WeightsInput(workflow_id=self.state.target.workflow_id, job=job,
                                                     owner=self.state.target.owner.user),
                    task_queue=NODES_TASK_QUEUE, start_to_close_timeout=timedelta(hours=12),
                    heartbeat_timeout=timedelta(seconds=60), retry_policy=RetryPolicy(maximum_attempts=3))
            except ActivityError as error:
                cause = error.cause
                message = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
                self._pause(f"fetching revision's weights failed: {message}")
                self._set(resume_phase=RolloutPhase.PREPARING)
                return
            self.state.target_model_dir, self.state.target_weights = result.model_dir, result
        if self.state.rollout is not None and self.state.rollout.phase is RolloutPhase.PREPARING:
            self._set(phase=RolloutPhase.ROLLING)

    def _finish(self, how: RolloutPhase) -> None:
        rollout = self.state.rollout
        assert rollout is not None
        if how is RolloutPhase.COMPLETE and self.state.target is not None:
            self.state.input = self.state.target
            self.state.model_dir = self.state.target_model_dir or self.state.model_dir
            if self.state.target_weights is not None:
                self.state.weights = self.state.target_weights
            self.state.revision = rollout.to_revision
            self.state.event("rollout_complete", f"revision {rollout.to_revision} serves; revision "
                             f"{rollout.from_revision}'s copies stopped")
        else:
            self.state.event("rollout_rolled_back", f"revision {rollout.from_revision} serves; revision "
                             f"{rollout.to_revision}'s copies stopped")
            self.state.rolled_back = [*self.state.rolled_back, rollout.to_revision][-MAX_ROLLED_BACK:]
        self._set(phase=how, traffic={}, message="")
        self.state.target, self.state.want = None, None
        self.state.revision_of = {c: r for c, r in self.state.revision_of.items() if c in self.state.copies}
        self.state.nudge()

    def on_new_copy_failed(self, copy_id: str, message: str) -> None:
        """A copy of the revision being rolled to failed: the rollout pauses; the old revision serves on."""
        if self.state.rollout is not None and self.state.rollout.phase is not RolloutPhase.PAUSED:
            self._pause(f"{copy_id} of revision {self.state.rollout.to_revision} failed: {message}; revision "
                        f"{self.state.rollout.from_revision} serves on. `rollout resume` retries, `rollout "
                        "rollback` stops the new copies")
        self.state.nudge()
