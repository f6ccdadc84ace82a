"""CopyPool: PoolWorkflow's pool of child CopyWorkflows — place up to the desired size, drain on scale-in,
heal failures, stop them all on stop — and its continue-as-new, which re-attaches the running copies by ID."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from berth.settings import CONTROL_TASK_QUEUE
    from workflows import activity_stubs as stubs
    from workflows.copy import CopyWorkflow
    from workflows.drain import drain_grace, drain_note, moves_to_start, replacement_serves
    from workflows.payloads import (
        CopyInfo,
        CopyInput,
        CopyResult,
        CopyStatus,
        DrainInput,
        DrainResult,
        Phase,
        PoolInput,
    )
    from workflows.placement import new_copy
    from workflows.pool_phase import update_phase
    from workflows.pool_size import resize, revision_of, rollout_active, unbalanced
    from workflows.pool_state import PoolState
    from workflows.rollout import RolloutDriver
    from workflows.rollout_payloads import MoveRequest
    from workflows.slurm_copy import SlurmCopyWorkflow

Running = dict[str, asyncio.Task[None]]
# A moved copy drains once its replacement is ready (patched: histories of earlier moves replay as they ran),
# or after this long without one (the node's drain must end: a pool with no capacity to move to).
MOVE_PATCH = "move-replacement-first"
MOVE_WAIT = timedelta(minutes=10)


class CopyPool:
    """The pool loop's half of a PoolWorkflow: it runs the copies, executing the deciders' verdicts."""

    def __init__(self, state: PoolState, rollout: RolloutDriver) -> None:
        self.state = state
        self.rollout = rollout

    # --- continue-as-new --------------------------------------------------------------------------

    def _continue_suggested(self) -> bool:
        if not self.state.new_shape or self.state.input is None:
            return False
        info = workflow.info()
        limit = self.state.input.timings.continue_as_new_after_events
        return info.is_continue_as_new_suggested() or (0 < limit <= info.get_current_history_length())

    def _may_continue(self, running: Running) -> bool:
        """Suggested, and nothing in between: no drain, no copy end unhandled, every child started."""
        return self._continue_suggested() and not self.state.draining and not self.state.finished \
            and not rollout_active(self.state) and not self.state.moves \
            and all(c in self.state.started or c in self.state.attached for c in running) \
            and (self.state.front_id is None or self.state.front_started) and not self.state.stop_requested

    async def _continue_as_new(self, input: PoolInput, running: Running, model_dir: str) -> None:
        await workflow.wait_condition(workflow.all_handlers_finished)
        if not self._may_continue(running):  # a copy ended, a drain or a stop began meanwhile: next time
            return
        ids = tuple(running)
        self.state.event("continued_as_new", f"history at {workflow.info().get_current_history_length()} "
                         f"events: continuing as new with {len(ids)} running copies")
        workflow.continue_as_new(input.model_copy(update={"carry": self.state.carry(ids, model_dir)}))

    # --- the copies --------------------------------------------------------------------------------
    def _copy_input(self, input: PoolInput, model_dir: str, revision: int = 1) -> CopyInput:
        index = self.state.next_copy
        self.state.next_copy += 1
        return new_copy(input, model_dir, index, revision, self.state.weights, workflow.info().workflow_id)

    async def _run_copy(self, copy: CopyInput) -> None:
        self.state.copies[copy.copy_id] = CopyInfo(copy_id=copy.copy_id, status=CopyStatus.SCHEDULING,
                                                   revision=copy.revision)
        # A Slurm cluster's copies are jobs (issue 35); every other pool's run on Berth's node agents.
        slurm = self.state.input is not None and self.state.input.placement_backend == "slurm"
        try:
            if slurm:
                job = await workflow.start_child_workflow(
                    SlurmCopyWorkflow.run, copy, id=copy.copy_id,
                    parent_close_policy=workflow.ParentClosePolicy.ABANDON)
                self.state.started.add(copy.copy_id)
                result: CopyResult = await job
            elif self.state.new_shape:  # abandoned, not cancelled, when this run continues as new
                handle = await workflow.start_child_workflow(
                    CopyWorkflow.run, copy, id=copy.copy_id, parent_close_policy=workflow.ParentClosePolicy.ABANDON)
                self.state.started.add(copy.copy_id)
                result = await handle
            else:
                result = await workflow.execute_child_workflow(
                    CopyWorkflow.run, copy, id=copy.copy_id,
                    parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                )
        except ChildWorkflowError as error:
            result = CopyResult(copy_id=copy.copy_id, status=CopyStatus.FAILED, message=str(error.cause or error))
        self._copy_ended(result)

    async def _attached_copy(self, copy_id: str) -> None:
        """A copy an earlier run started: it runs on; cancelling this task cancels it by ID."""
        try:
            await workflow.wait_condition(lambda: copy_id in self.state.reported)
        except asyncio.CancelledError:
            with contextlib.suppress(FailureError):  # it ended meanwhile: its report is on its way
                await workflow.get_external_workflow_handle(copy_id).cancel()
            await workflow.wait_condition(lambda: copy_id in self.state.reported)
        self.state.attached.discard(copy_id)
        self._copy_ended(self.state.reported[copy_id])

    def _copy_ended(self, result: CopyResult) -> None:
        self.state.reported.pop(result.copy_id, None)
        self.state.started.discard(result.copy_id)
        self.state.finished[result.copy_id] = result
        self.state.copies.pop(result.copy_id, None)
        self.state.ready_since.pop(result.copy_id, None)
        self.state.nudge()
        update_phase(self.state)

    # --- the pool loop -------------------------------------------------------------------------------
    def move(self, request: MoveRequest) -> int:
        """Copies on a drained node (`move_copies`): each is replaced elsewhere and drained with the grace."""
        moving = [c for c in request.copy_ids if c in self.state.copies and c not in self.state.draining]
        self.state.moves.extend((c, request.grace_s) for c in moving)
        if moving:
            self.state.event("copies_moving", f"{request.reason or 'moving'}: {', '.join(moving)} drain with a "
                             f"grace of {request.grace_s:.0f} s and are placed elsewhere")
            self.state.nudge()
        return len(moving)

    async def hold(self, input: PoolInput, model_dir: str) -> None:
        self.state.model_dir = model_dir
        running: Running = {c: asyncio.create_task(self._attached_copy(c)) for c in sorted(self.state.attached)}
        drains: list[asyncio.Task[None]] = []
        # Histories recorded before pools healed themselves never re-place with back-off.
        healing = workflow.patched("pool-self-healing")
        while True:
            input = self.state.serving()  # a completed rollout changes it
            self.rollout.ensure()
            pause = self.state.replace_pause()
            self._start_moves(running, drains)
            for decided in resize(self.state, running, pause is not None):
                for _ in range(decided.start):
                    self._start_copy(running, decided.revision)
                grace_s = drain_grace(input.definition.pool.drain_grace_s, self.state.next_grace_s)
                for copy_id in decided.drain:
                    self.state.draining.append(copy_id)
                    drains.append(asyncio.create_task(self._drain(copy_id, running, grace_s)))
            self.state.next_grace_s = None
            self.state.pool_nudged = False

            def woken(paused: bool = pause is not None) -> bool:
                return (self.state.stop_requested or bool(self.state.finished)
                        or unbalanced(self.state, running, paused) or self.state.pool_nudged
                        or bool(self.state.moves) or self._may_continue(running))

            with contextlib.suppress(asyncio.TimeoutError):  # the back-off ran out: place the replacement
                await workflow.wait_condition(woken, timeout=pause)
            if self.state.stop_requested:
                self.state.phase = Phase.STOPPING
                self.rollout.stop()
                for drain in drains:
                    drain.cancel()
                await self._stop_all(running)
                return
            await self._handle_finished(input, running, healing)
            if self._may_continue(running):
                await self._continue_as_new(input, running, self.state.model_dir)

    def _start_copy(self, running: Running, revision: int) -> None:
        copy = self._copy_input(*self.state.source(revision), revision)
        if revision != 1 or self.state.revision_of:
            self.state.revision_of[copy.copy_id] = revision
        running[copy.copy_id] = asyncio.create_task(self._run_copy(copy))
        update_phase(self.state)

    def _start_moves(self, running: Running, drains: list[asyncio.Task[None]]) -> None:
        """Copies leaving a drained node: drained with their grace; the loop places their replacements."""
        moves, self.state.moves = self.state.moves, []
        for copy_id, grace_s in moves_to_start(moves, running, self.state.draining):
            self.state.draining.append(copy_id)
            drains.append(asyncio.create_task(self._drain(copy_id, running, grace_s, moved=True)))

    async def _handle_finished(self, input: PoolInput, running: Running, healing: bool) -> None:
        pool = input.definition.pool
        for copy_id, result in list(self.state.finished.items()):
            del self.state.finished[copy_id]
            running.pop(copy_id, None)
            if copy_id in self.state.draining:
                continue  # scaled in on purpose: its end is the drain's business
            rollout = self.state.rollout
            if rollout_active(self.state) and rollout is not None \
                    and revision_of(self.state, copy_id) == rollout.to_revision:
                if result.status is CopyStatus.FAILED:
                    self.rollout.on_new_copy_failed(copy_id, result.message)
                continue  # the rollout's business: the old revision serves on
            try:
                if healing:
                    self.state.on_copy_failed(result, len(running), input)
                else:
                    self.state.on_copy_finished(result, len(running), pool.min_replicas, pool.replace_failed_copies)
                update_phase(self.state)  # e.g. dropped to zero copies
            except ApplicationError:
                self.state.phase = Phase.STOPPING
                await self._stop_all(running)
                raise

    async def _stop_all(self, running: Running) -> None:
        for task in running.values():
            task.cancel()  # cancels the child workflow: it stops its ranks and releases GPUs
        if running:  # workflow.wait refuses an empty list (e.g. a pool scaled to zero)
            await workflow.wait(list(running.values()))

    async def _replacement_ready(self, copy_id: str) -> None:
        """Until the moved copy's replacement serves, the pool stops, or MOVE_WAIT went by (no capacity for a
        replacement: the node's drain goes on, as it must)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await workflow.wait_condition(lambda: replacement_serves(self.state, copy_id), timeout=MOVE_WAIT)

    async def _drain(self, copy_id: str, running: Running, grace_s: float, moved: bool = False) -> None:
        """Scale one copy in: no new requests, in-flight ones finish (up to the grace), then stop it. A copy
        moved off a drained node first waits for its replacement to be ready (issue 31: a one-copy pool was
        left with none for seconds); histories recorded before replay without the wait."""
        if moved and workflow.patched(MOVE_PATCH):
            await self._replacement_ready(copy_id)
        info = self.state.copies.get(copy_id)
        task = running.get(copy_id)
        try:
            if info is not None and info.status is CopyStatus.READY:
                self.state.event("copy_draining", f"{copy_id} takes no new requests; in-flight ones get "
                                 f"up to {grace_s:.0f} s", copy_id)
                result: DrainResult = await workflow.execute_activity(
                    stubs.drain_replica, DrainInput(copy_id=copy_id, url=info.url, grace_s=grace_s),
                    task_queue=CONTROL_TASK_QUEUE,
                    start_to_close_timeout=timedelta(seconds=grace_s + 60),
                )
                note = drain_note(result.drained, result.waited_s, grace_s)
                self.state.event("copy_drained", f"{copy_id}: {note}; stopping it", copy_id)
            if task is not None and not task.done():
                task.cancel()  # cancels the child workflow: it stops its ranks and releases its GPUs
                await workflow.wait([task])
        finally:
            running.pop(copy_id, None)
            self.state.copies.pop(copy_id, None)
            if copy_id in self.state.draining:
                self.state.draining.remove(copy_id)
            update_phase(self.state)
