"""CopyWorkflow: place one replica copy, run its ranks, publish it while healthy, and stop it as a
unit as soon as any rank ends."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import CopyRecord, FenceRequest, Placement, ReserveRequest, ReserveResult
    from berth.settings import CONTROL_TASK_QUEUE, node_task_queue
    from workflows import activity_stubs as stubs
    from workflows.authorized import require_authorized
    from workflows.copy_reports import ParentReports
    from workflows.payloads import (
        CopyInfo,
        CopyInput,
        CopyResult,
        CopyStatus,
        Event,
        HealthCheck,
        RankExit,
        RankSpec,
        ReadyCheck,
    )
    from workflows.supervised import MAX_ADOPTIONS, agent_went_silent, start_supervised

CONTROL_TIMEOUT = timedelta(seconds=30)
CONTROL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))
# Readiness probing is idempotent: a probe lost with its node agent is simply asked again.
PROBE_RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=["NotReady"])
MAX_BLOCKED_BACKOFF_S = 5.0


@workflow.defn
class CopyWorkflow:
    def __init__(self) -> None:
        self.status = CopyStatus.SCHEDULING
        self.detail = ""
        self.url: str | None = None
        self.nodes: tuple[str, ...] = ()
        self.input: CopyInput | None = None
        self._stopping = False
        # Nodes where a rank was given up with its agent silent: its process may live on there.
        self._lost_nodes: set[str] = set()
        # Reports to the pool, sent in order by a task of their own (workflows/copy_reports.py).
        self._reports_aside = False
        self._reports: ParentReports | None = None

    @workflow.query
    def info(self) -> CopyInfo:
        assert self.input is not None
        return CopyInfo(copy_id=self.input.copy_id, status=self.status, url=self.url, nodes=self.nodes,
                           detail=self.detail, revision=self.input.revision)

    async def _tell_parent(self, kind: str | None = None, message: str = "") -> None:
        assert self.input is not None
        parent = workflow.get_external_workflow_handle(self.input.parent_workflow_id)
        # State first: whoever sees the event (e.g. scheduling_blocked) then also sees the detail.
        reports: list[tuple[str, CopyInfo | Event | CopyResult]] = [("copy_state", self.info())]
        if kind:
            reports.append(("copy_event", Event(at=workflow.now(), kind=kind, message=message,
                                                copy_id=self.input.copy_id)))
        if self._reports_aside:
            assert self._reports is not None
            self._reports.send(reports)
            return
        for name, argument in reports:
            await parent.signal(name, argument)

    async def _report_end(self, result: CopyResult) -> CopyResult:
        assert self._reports is not None
        return await self._reports.end(result)

    @workflow.run
    async def run(self, input: CopyInput) -> CopyResult:
        self.input = input
        # Histories recorded before copies reported aside and told their pool how they ended await each report.
        self._reports_aside = workflow.patched("copy-reports-aside")
        self._reports = ParentReports(input.parent_workflow_id)
        if not self._reports_aside:
            return await self._run(input)
        try:
            result = await self._run(input)
        except asyncio.CancelledError:
            await self._report_end(CopyResult(copy_id=input.copy_id, status=CopyStatus.STOPPED,
                                              message="stopped on request"))
            raise
        except ApplicationError as error:
            await self._report_end(CopyResult(copy_id=input.copy_id, status=CopyStatus.FAILED, message=error.message))
            raise
        return await self._report_end(result)

    async def _run(self, input: CopyInput) -> CopyResult:
        await require_authorized(stubs.verify_copy_parent, input)
        try:
            placement = await self._reserve(input)
        except asyncio.CancelledError:
            # Stopped while reserving: the cancel does not wait for reserve_placement, which may still
            # have placed the copy. Release it, or its GPUs stay held with no copy to free them (a pool
            # that fails while re-placing a copy does exactly this). Older histories ended here as they were.
            if workflow.patched("release-on-cancelled-reserve"):
                await self._release(input)
            raise
        try:
            return await self._serve(input, placement)
        finally:
            await self._release(input)

    async def _release(self, input: CopyInput) -> None:
        if self._lost_nodes and workflow.patched("fence-lost-ranks"):
            # Before the release: what a lost rank holds stays reserved until its node says it is gone.
            await workflow.execute_activity(
                stubs.fence_placement, FenceRequest(copy_id=input.copy_id, nodes=tuple(sorted(self._lost_nodes))),
                task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=CONTROL_TIMEOUT, retry_policy=CONTROL_RETRY,
            )
        await workflow.execute_activity(
            stubs.release_placement, input.copy_id, task_queue=CONTROL_TASK_QUEUE,
            start_to_close_timeout=CONTROL_TIMEOUT, retry_policy=CONTROL_RETRY,
        )

    async def _reserve(self, input: CopyInput) -> Placement:
        request = ReserveRequest(workflow_id=input.workflow_id, copy_id=input.copy_id, nodes=input.nodes,
                                 gpus_per_node=input.gpus_per_node, gpu_memory_gb=input.gpu_memory_gb,
                                 prefer_volume=input.volume, prefer_model=input.model_digest,
                                 sites=input.sites)
        settle = workflow.patched("reserve-settles-before-release")
        backoff = 0.5
        last_reason = None
        while True:
            attempt = workflow.start_activity(
                stubs.reserve_placement, request, task_queue=CONTROL_TASK_QUEUE,
                start_to_close_timeout=CONTROL_TIMEOUT, retry_policy=CONTROL_RETRY,
            )
            if not settle:  # older histories: the cancel went to the attempt, which the release could outrun
                result: ReserveResult = await attempt
            else:
                try:
                    result = await asyncio.shield(attempt)
                except asyncio.CancelledError:
                    # Stopped mid-attempt: let the attempt end before _run releases, or a reservation made
                    # after the release holds GPUs with no copy to free them (seen under load: a pool that
                    # gave up while re-placing a copy, the worker logging "Activity not found on completion").
                    with contextlib.suppress(ActivityError):
                        await attempt
                    raise
            if result.placement is not None:
                return result.placement
            if result.blocked_reason != last_reason:
                last_reason = result.blocked_reason
                self.detail = f"pending: {last_reason}"
                await self._tell_parent("scheduling_blocked", last_reason or "")
            await workflow.sleep(backoff)
            backoff = min(backoff * 2, MAX_BLOCKED_BACKOFF_S)

    async def _serve(self, input: CopyInput, placement: Placement) -> CopyResult:
        leader = placement.leader
        self.nodes = tuple(r.node_id for r in placement.ranks)
        self.status = CopyStatus.STARTING
        self.detail = "ranks starting on " + ", ".join(self.nodes)
        await self._tell_parent("copy_placed", f"{input.copy_id} placed on {', '.join(self.nodes)}")
        timings = input.timings
        heartbeat = timedelta(seconds=timings.rank_heartbeat_timeout_s)
        self._stopping = False
        ranks: dict[int, asyncio.Task[RankExit]] = {}
        url = f"http://{leader.address}:{leader.port}"
        # Liveness, once the engine answers: only the leader serves HTTP (the other ranks are headless).
        health = HealthCheck(url=url, copy_id=input.copy_id, interval_s=timings.health_check_interval_s,
                             timeout_s=timings.health_check_timeout_s,
                             failures_to_fail=timings.health_failures_to_fail)
        for rank in placement.ranks:
            spec = RankSpec(
                workflow_id=input.workflow_id, copy_id=input.copy_id, rank=rank.rank, nnodes=input.nodes,
                engine=input.engine, gpus_per_node=input.gpus_per_node, gpus=rank.gpus,
                host=rank.address, port=rank.port,  # its node's cluster address, never 0.0.0.0 (issue 29)
                master_addr=leader.address, master_port=placement.master_port, model_dir=input.model_dir,
                log_name=f"vllm-rank-{rank.rank}", health=health if rank.rank == leader.rank else None,
                devices=rank.devices, owner=input.owner,
            )
            ranks[rank.rank] = asyncio.create_task(self._rank_life(spec, rank.node_id))
        published = False
        try:
            ready = workflow.start_activity(
                stubs.wait_ready, ReadyCheck(url=url, model_id=input.engine.served_model_name,
                                         timeout_s=input.engine.startup_timeout_s, copy_id=input.copy_id),
                task_queue=node_task_queue(leader.node_id),
                start_to_close_timeout=timedelta(seconds=input.engine.startup_timeout_s + 60),
                heartbeat_timeout=heartbeat, retry_policy=PROBE_RETRY,
            )
            await workflow.wait([ready, *ranks.values()], return_when=asyncio.FIRST_COMPLETED)
            if ready.done() and ready.exception() is None and not any(t.done() for t in ranks.values()):
                await workflow.execute_activity(
                    stubs.publish_replica,
                    CopyRecord(workflow_id=input.workflow_id, endpoint_id=input.endpoint_id,
                                  copy_id=input.copy_id, url=url, revision=input.revision),
                    task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=CONTROL_TIMEOUT, retry_policy=CONTROL_RETRY,
                )
                published = True
                self.url, self.status, self.detail = url, CopyStatus.READY, f"serving at {url}"
                await self._tell_parent("copy_ready", f"{input.copy_id} is ready at {url}")
                await workflow.wait(list(ranks.values()), return_when=asyncio.FIRST_COMPLETED)
            elif not ready.done():
                ready.cancel()
                await workflow.wait([ready])
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved here; its message is used below when no rank ended
            return await self._end_as_unit(input, ranks, ready, published)
        except asyncio.CancelledError:
            self.status, self.detail = CopyStatus.STOPPING, "stopping on request"
            await self._stop_ranks(ranks, published, input)
            self.status, self.detail = CopyStatus.STOPPED, "stopped"
            return CopyResult(copy_id=input.copy_id, status=CopyStatus.STOPPED, message="stopped on request")

    async def _end_as_unit(self, input: CopyInput, ranks: dict[int, asyncio.Task[RankExit]],
                           ready: asyncio.Task[None], published: bool) -> CopyResult:
        """The first rank to end (or a failed readiness probe) ends the whole copy."""
        first: RankExit | None = None
        interrupted = False
        for rank_index in sorted(ranks):
            task = ranks[rank_index]
            if not task.done():
                continue
            exit_info = _rank_outcome(task, rank_index, self.nodes[rank_index])
            # A rank lost with its node agent is an infrastructure fault, like a stopped agent (or one the
            # shutdown marker says was stopped): the service places the copy again without spending
            # ReplaceFailedCopies.
            interrupted = interrupted or exit_info.interrupted or (
                exit_info.reason == "lost" and workflow.patched("lost-rank-interrupts"))
            if first is None:
                first = exit_info
        if first is not None:
            message = ("copy stopped as a unit: " + first.describe())
            if not published and first.log_tail:
                # Died while starting: its own last words are what the user needs to see.
                message += "; last lines of its log:\n" + first.log_tail
        else:
            error = ready.exception() if ready.done() else None
            cause = error.cause if isinstance(error, ActivityError) and error.cause else error
            message = f"copy never became ready: {cause}"
        self.status, self.detail = CopyStatus.STOPPING, message
        await self._tell_parent("copy_stopping", message)
        await self._stop_ranks(ranks, published, input)
        status = CopyStatus.INTERRUPTED if interrupted else CopyStatus.FAILED
        self.status, self.detail = status, message
        return CopyResult(copy_id=input.copy_id, status=status, failure=first, message=message)

    async def _rank_life(self, spec: RankSpec, node_id: str) -> RankExit:
        """Run one rank until it ends; outlive its node agent: when the agent stops heartbeating, ask
        a restarted agent on the same node to adopt the live process, and call the rank lost only when
        none does within the adopt window. Always returns how the rank ended (never raises, except on
        cancellation of the copy)."""
        assert self.input is not None
        timings = self.input.timings
        rank_activity = stubs.run_rank
        adoptions = 0
        while True:
            try:
                return await start_supervised(rank_activity, spec, node_id, timings,
                                              adopting=rank_activity is stubs.adopt_rank)
            except ActivityError as error:
                cause = error.cause
                if isinstance(cause, CancelledError) or self._stopping:
                    if agent_went_silent(error):  # its stop never reached the process
                        self._lost_nodes.add(node_id)
                    return RankExit(rank=spec.rank, node_id=node_id, reason="cancelled")
                if isinstance(cause, ApplicationError) and cause.type == "AgentStopped":
                    return RankExit(rank=spec.rank, node_id=node_id, reason="agent-stopped")
                if isinstance(cause, ApplicationError) and cause.type == "RankSpawnFailed":
                    return RankExit(rank=spec.rank, node_id=node_id, reason="spawn-failed",
                                    note=cause.message)
                if agent_went_silent(error) and adoptions < MAX_ADOPTIONS:
                    adoptions += 1
                    rank_activity = stubs.adopt_rank
                    await self._tell_parent(
                        "rank_unresponsive",
                        f"node agent of {node_id} stopped answering for rank {spec.rank} of {spec.copy_id}; "
                        f"the rank keeps running and a restarted agent has "
                        f"{timings.rank_adopt_window_s:.0f} s to adopt it",
                    )
                    continue
                if isinstance(cause, TimeoutError):
                    self._lost_nodes.add(node_id)
                    return RankExit(rank=spec.rank, node_id=node_id, reason="lost",
                                    note=f"no node agent on {node_id} adopted it within "
                                         f"{timings.rank_adopt_window_s:.0f} s")
                message = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
                return RankExit(rank=spec.rank, node_id=node_id, reason="exited", note=message)

    async def _stop_ranks(self, ranks: dict[int, asyncio.Task[RankExit]], published: bool, input: CopyInput) -> None:
        self._stopping = True
        if published:
            await workflow.execute_activity(
                stubs.unpublish_replica, input.copy_id, task_queue=CONTROL_TASK_QUEUE,
                start_to_close_timeout=CONTROL_TIMEOUT, retry_policy=CONTROL_RETRY,
            )
        for task in ranks.values():
            if not task.done():
                task.cancel()
        # Wait until every rank's process is gone (the activities stop them: SIGTERM, then SIGKILL).
        if ranks:
            await workflow.wait(list(ranks.values()))
        for task in ranks.values():
            if not task.cancelled():
                task.exception()  # retrieved: the outcome is already reported above


def _rank_outcome(task: asyncio.Task[RankExit], rank: int, node_id: str) -> RankExit:
    if task.cancelled():
        return RankExit(rank=rank, node_id=node_id, reason="cancelled")
    error = task.exception()
    if error is not None:  # _rank_life returns rather than raises; say what escaped anyway
        return RankExit(rank=rank, node_id=node_id, reason="exited", note=str(error))
    return task.result()
