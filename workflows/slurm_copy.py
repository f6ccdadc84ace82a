"""SlurmCopyWorkflow: one replica copy placed as one Slurm job (issue 35) — submit it, wait while Slurm keeps it
pending (the copy is `scheduling_blocked` with Slurm's reason, never failed), publish it once rank 0 serves with
every rank on a node of its own, and when the job ends (a rank's death ends it: --kill-on-bad-exit) report the copy
failed with the rank, node and exit status Slurm recorded, so the pool re-places it as a new job. A stop cancels
the job and waits until `squeue` lists it no more. The same reports to the pool as CopyWorkflow."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import CopyRecord, ReserveRequest, ReserveResult
    from berth.settings import CONTROL_TASK_QUEUE
    from workflows import activity_stubs as stubs
    from workflows.authorized import require_authorized
    from workflows.copy_reports import ParentReports
    from workflows.payloads import CopyInfo, CopyInput, CopyResult, CopyStatus, Event, HealthCheck, RankExit
    from workflows.slurm_payloads import SlurmCopyEnd, SlurmJobRef, SlurmJobView, SlurmReadyCheck, SlurmStartWait

SHORT = timedelta(seconds=60)
RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5),
                    non_retryable_error_types=["SlurmRefused", "SlurmNotConfigured", "NotReady"])
WATCH_HEARTBEAT = timedelta(seconds=10)  # the watch heartbeats each second: a worker gone is noticed in 10 s
MAX_PENDING_POLL_S = 5.0  # how often a pending job's reason is read once it has waited a while
START_WAIT_PATCH = "slurm-start-wait"  # the wait for a pending job is one activity's, no longer workflow timers


@workflow.defn
class SlurmCopyWorkflow:
    def __init__(self) -> None:
        self.status = CopyStatus.SCHEDULING
        self.detail = ""
        self.url: str | None = None
        self.nodes: tuple[str, ...] = ()
        self.input: CopyInput | None = None
        self.job: SlurmJobRef | None = None
        self._reports: ParentReports | None = None

    @workflow.query
    def info(self) -> CopyInfo:
        assert self.input is not None
        return CopyInfo(copy_id=self.input.copy_id, status=self.status, url=self.url, nodes=self.nodes,
                        detail=self.detail, revision=self.input.revision)

    def _tell_parent(self, kind: str | None = None, message: str = "") -> None:
        assert self.input is not None and self._reports is not None
        reports: list[tuple[str, CopyInfo | Event | CopyResult]] = [("copy_state", self.info())]
        if kind:
            reports.append(("copy_event", Event(at=workflow.now(), kind=kind, message=message,
                                                copy_id=self.input.copy_id)))
        self._reports.send(reports)

    @workflow.run
    async def run(self, input: CopyInput) -> CopyResult:
        self.input = input
        self._reports = ParentReports(input.parent_workflow_id)
        try:
            result = await self._run(input)
        except asyncio.CancelledError:
            await self._reports.end(CopyResult(copy_id=input.copy_id, status=CopyStatus.STOPPED,
                                               message="stopped on request"))
            raise
        except ApplicationError as error:
            await self._reports.end(CopyResult(copy_id=input.copy_id, status=CopyStatus.FAILED, message=error.message))
            raise
        return await self._reports.end(result)

    async def _run(self, input: CopyInput) -> CopyResult:
        await require_authorized(stubs.verify_copy_parent, input)
        try:
            await self._reserve(input)
            return await self._job(input)
        finally:
            await workflow.execute_activity(stubs.release_placement, input.copy_id, task_queue=CONTROL_TASK_QUEUE,
                                            start_to_close_timeout=SHORT, retry_policy=RETRY)

    async def _reserve(self, input: CopyInput) -> None:
        """Hold the copy's reservation (what quotas count and what its publish needs; Slurm picks the nodes): a
        quota that refuses it keeps it waiting, `scheduling_blocked` with the policy's line, as any copy."""
        request = ReserveRequest(workflow_id=input.workflow_id, copy_id=input.copy_id, nodes=input.nodes,
                                 gpus_per_node=input.gpus_per_node, gpu_memory_gb=input.gpu_memory_gb,
                                 placed_by="slurm")
        backoff, last = 0.5, None
        while True:
            result: ReserveResult = await workflow.execute_activity(
                stubs.reserve_placement, request, task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
                retry_policy=RETRY)
            if result.placement is not None:
                return
            if result.blocked_reason != last:
                last = result.blocked_reason
                self.detail = f"pending: {last}"
                self._tell_parent("scheduling_blocked", last or "")
            await workflow.sleep(backoff)
            backoff = min(backoff * 2, MAX_PENDING_POLL_S)

    async def _job(self, input: CopyInput) -> CopyResult:
        try:
            self.job = await workflow.execute_activity(
                stubs.submit_slurm_copy, input, task_queue=CONTROL_TASK_QUEUE,
                start_to_close_timeout=SHORT, retry_policy=RETRY)
        except ActivityError as error:
            raise ApplicationError(_cause(error), type="SlurmRefused", non_retryable=True) from None
        published = False
        try:
            if not await self._started(input, self.job):
                end = await self._watch(self.job)
                return self._failed(input, end, "the job ended before it started")
            published, end = await self._serve(input, self.job)
            return self._failed(input, end, "")
        except asyncio.CancelledError:
            self.status, self.detail = CopyStatus.STOPPING, "stopping on request"
            await self._stop(input, self.job, published)
            self.status, self.detail = CopyStatus.STOPPED, "stopped"
            return CopyResult(copy_id=input.copy_id, status=CopyStatus.STOPPED, message="stopped on request")
        finally:
            if self.status not in (CopyStatus.STOPPED, CopyStatus.STOPPING):
                await self._stop(input, self.job, published)  # a copy stops as a unit: no rank outlives it

    async def _started(self, input: CopyInput, job: SlurmJobRef) -> bool:
        """Wait while Slurm keeps the job pending, telling the pool Slurm's reason each time it changes; False:
        the job ended without starting."""
        if not workflow.patched(START_WAIT_PATCH):
            return await self._started_by_timers(input, job)
        reason: str | None = None
        while True:  # the activity waits (and polls) until the job starts or its reason changes
            view: SlurmJobView = await workflow.execute_activity(
                stubs.wait_slurm_copy_started, SlurmStartWait(job=job, told=reason), task_queue=CONTROL_TASK_QUEUE,
                start_to_close_timeout=timedelta(days=3650), heartbeat_timeout=WATCH_HEARTBEAT, retry_policy=RETRY)
            if not view.pending:
                return self._placed(input, job, view)
            reason = view.reason
            self._pending(job, reason)

    async def _started_by_timers(self, input: CopyInput, job: SlurmJobRef) -> bool:
        """How a copy started before START_WAIT_PATCH waited, for its history's replay: a workflow timer between
        two looks (one fires up to ~1 s late: the wait is now the activity's)."""
        backoff, reason = 0.1, None  # a job on an idle partition starts within a tick: look again soon
        while True:
            view: SlurmJobView = await workflow.execute_activity(
                stubs.slurm_copy_state, job, task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT,
                retry_policy=RETRY)
            if not view.pending:
                return self._placed(input, job, view)
            if view.reason != reason:
                reason = view.reason
                self._pending(job, reason)
            await workflow.sleep(backoff)
            backoff = min(backoff * 2, MAX_PENDING_POLL_S)

    def _pending(self, job: SlurmJobRef, reason: str) -> None:
        self.detail = f"pending: Slurm job {job.job_id} waits ({reason})"
        self._tell_parent("scheduling_blocked", f"Slurm job {job.job_id} is pending: {reason}")

    def _placed(self, input: CopyInput, job: SlurmJobRef, view: SlurmJobView) -> bool:
        if view.ended:
            return False
        self.status, self.detail = CopyStatus.STARTING, f"Slurm job {job.job_id} running: ranks starting"
        self._tell_parent("copy_placed", f"{input.copy_id} placed as Slurm job {job.job_id}")
        return True

    async def _serve(self, input: CopyInput, job: SlurmJobRef) -> tuple[bool, SlurmCopyEnd]:
        """Ready (every rank on a node of its own, rank 0 serving) → published; then until the job ends."""
        watch = workflow.start_activity(stubs.watch_slurm_copy, job, task_queue=CONTROL_TASK_QUEUE,
                                        start_to_close_timeout=timedelta(days=3650), heartbeat_timeout=WATCH_HEARTBEAT,
                                        retry_policy=RETRY)
        check = SlurmReadyCheck(job=job, url="", model_id=input.engine.served_model_name, nodes=input.nodes,
                                timeout_s=input.engine.startup_timeout_s)
        ready = workflow.start_activity(stubs.wait_slurm_copy_ready, check, task_queue=CONTROL_TASK_QUEUE,
                                        start_to_close_timeout=timedelta(seconds=input.engine.startup_timeout_s + 60),
                                        heartbeat_timeout=WATCH_HEARTBEAT, retry_policy=RETRY)
        try:
            await workflow.wait([watch, ready], return_when=asyncio.FIRST_COMPLETED)
            if ready.done() and ready.exception() is None and not watch.done():
                view = ready.result()
                assert view.url is not None
                await workflow.execute_activity(
                    stubs.publish_replica, CopyRecord(workflow_id=input.workflow_id, endpoint_id=input.endpoint_id,
                                                      copy_id=input.copy_id, url=view.url, revision=input.revision),
                    task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=SHORT, retry_policy=RETRY)
                self.url, self.nodes = view.url, view.nodes
                self.status, self.detail = CopyStatus.READY, f"serving at {view.url} (Slurm job {job.job_id})"
                self._tell_parent("copy_ready", f"{input.copy_id} is ready at {view.url}")
                return True, await self._live(input, view, watch)
            if watch.done():
                return False, watch.result()
            reason = _cause(ready.exception())
            return False, SlurmCopyEnd(state="NOT_READY", message=f"copy never became ready: {reason}")
        finally:
            for task in (ready, watch):
                if not task.done():
                    task.cancel()
            await workflow.wait([ready, watch])

    async def _live(self, input: CopyInput, view: SlurmJobView,
                    watch: workflow.ActivityHandle[SlurmCopyEnd]) -> SlurmCopyEnd:
        """Until the job ends or, as a Kubernetes livenessProbe would say, rank 0's engine is hung (alive, its
        /health unanswered `health_failures_to_fail` times in a row): then the copy ends as a unit, as on Berth's own
        nodes, and its pool places it again as a new job."""
        timings = input.timings
        if timings.health_check_interval_s <= 0 or view.url is None:
            return await watch
        check = HealthCheck(url=view.url, copy_id=input.copy_id, interval_s=timings.health_check_interval_s,
                            timeout_s=timings.health_check_timeout_s, failures_to_fail=timings.health_failures_to_fail)
        health = workflow.start_activity(stubs.watch_slurm_copy_health, check, task_queue=CONTROL_TASK_QUEUE,
                                         start_to_close_timeout=timedelta(days=3650),
                                         heartbeat_timeout=WATCH_HEARTBEAT, retry_policy=RETRY)
        try:
            await workflow.wait([watch, health], return_when=asyncio.FIRST_COMPLETED)
            if watch.done():
                return watch.result()
            hung = health.result()
            node = view.nodes[0] if view.nodes else "its node"
            return SlurmCopyEnd(state="UNHEALTHY", message=f"rank 0's engine is hung: {hung}",
                                failure=RankExit(rank=0, node_id=node, reason="unhealthy", note=hung))
        finally:
            if not health.done():
                health.cancel()
                await workflow.wait([health])

    async def _watch(self, job: SlurmJobRef) -> SlurmCopyEnd:
        return await workflow.execute_activity(
            stubs.watch_slurm_copy, job, task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=timedelta(days=3650),
            heartbeat_timeout=WATCH_HEARTBEAT, retry_policy=RETRY)

    def _failed(self, input: CopyInput, end: SlurmCopyEnd, context: str) -> CopyResult:
        message = "copy stopped as a unit: " + (end.message if not context else f"{context}: {end.message}")
        if end.failure is not None:
            failure = end.failure
            message += f"; rank {failure.rank} on {failure.node_id}: {failure.note or failure.reason}"
        self.status, self.detail = CopyStatus.FAILED, message
        self._tell_parent("copy_stopping", message)
        return CopyResult(copy_id=input.copy_id, status=CopyStatus.FAILED, failure=end.failure, message=message)

    async def _stop(self, input: CopyInput, job: SlurmJobRef, published: bool) -> None:
        if published:
            await workflow.execute_activity(stubs.unpublish_replica, input.copy_id, task_queue=CONTROL_TASK_QUEUE,
                                            start_to_close_timeout=SHORT, retry_policy=RETRY)
        await workflow.execute_activity(stubs.cancel_slurm_copy, job, task_queue=CONTROL_TASK_QUEUE,
                                        start_to_close_timeout=timedelta(seconds=180),
                                        heartbeat_timeout=timedelta(seconds=60), retry_policy=RETRY)


def _cause(error: BaseException | None) -> str:
    cause = error.cause if isinstance(error, ActivityError) and error.cause else error
    return cause.message if isinstance(cause, ApplicationError) else str(cause)
