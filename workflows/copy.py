"""CopyWorkflow: place one replica copy, run its ranks, publish it while healthy, and stop it as a
unit as soon as any rank ends."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from berth.settings import CONTROL_TASK_QUEUE, node_task_queue
    from workflows.payloads import (
        CopyInput,
        CopyResult,
        CopyStatus,
        Event,
        Placement,
        RankExit,
        RankSpec,
        ReadyCheck,
        ReplicaInfo,
        ReplicaRecord,
        ReserveRequest,
        ReserveResult,
    )

CONTROL_TIMEOUT = timedelta(seconds=30)
CONTROL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))
RANK_HEARTBEAT = timedelta(seconds=30)
# A rank is one process: if it dies it must not be restarted behind the copy's back.
ONCE = RetryPolicy(maximum_attempts=1)
MAX_BLOCKED_BACKOFF_S = 5.0


@workflow.defn
class CopyWorkflow:
    def __init__(self) -> None:
        self.status = CopyStatus.SCHEDULING
        self.detail = ""
        self.url: str | None = None
        self.nodes: tuple[str, ...] = ()
        self.input: CopyInput | None = None

    @workflow.query
    def info(self) -> ReplicaInfo:
        assert self.input is not None
        return ReplicaInfo(copy_id=self.input.copy_id, status=self.status, url=self.url, nodes=self.nodes,
                           detail=self.detail)

    async def _tell_parent(self, kind: str | None = None, message: str = "") -> None:
        assert self.input is not None
        parent = workflow.get_external_workflow_handle(self.input.parent_workflow_id)
        if kind:
            event = Event(at=workflow.now(), kind=kind, message=message, copy_id=self.input.copy_id)
            await parent.signal("copy_event", event)
        await parent.signal("copy_state", self.info())

    @workflow.run
    async def run(self, input: CopyInput) -> CopyResult:
        self.input = input
        placement = await self._reserve(input)
        try:
            return await self._serve(input, placement)
        finally:
            await workflow.execute_activity(
                "release_placement", input.copy_id, task_queue=CONTROL_TASK_QUEUE,
                start_to_close_timeout=CONTROL_TIMEOUT, retry_policy=CONTROL_RETRY,
            )

    async def _reserve(self, input: CopyInput) -> Placement:
        request = ReserveRequest(workflow_id=input.workflow_id, copy_id=input.copy_id, nodes=input.nodes,
                                 gpus_per_node=input.gpus_per_node, gpu_memory_gb=input.gpu_memory_gb,
                                 prefer_volume=input.volume)
        backoff = 0.5
        last_reason = None
        while True:
            result: ReserveResult = await workflow.execute_activity(
                "reserve_placement", request, result_type=ReserveResult, task_queue=CONTROL_TASK_QUEUE,
                start_to_close_timeout=CONTROL_TIMEOUT, retry_policy=CONTROL_RETRY,
            )
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
        ranks: dict[int, asyncio.Task[RankExit]] = {}
        for rank in placement.ranks:
            spec = RankSpec(
                workflow_id=input.workflow_id, copy_id=input.copy_id, rank=rank.rank, nnodes=input.nodes,
                engine=input.engine, gpus_per_node=input.gpus_per_node, gpus=rank.gpus,
                host="0.0.0.0" if input.nodes > 1 else rank.address, port=rank.port,
                master_addr=leader.address, master_port=placement.master_port, model_dir=input.model_dir,
                log_name=f"vllm-rank-{rank.rank}",
            )
            ranks[rank.rank] = workflow.start_activity(
                "run_rank", spec, result_type=RankExit, task_queue=node_task_queue(rank.node_id),
                start_to_close_timeout=timedelta(days=3650), heartbeat_timeout=RANK_HEARTBEAT,
                retry_policy=ONCE, cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        url = f"http://{leader.address}:{leader.port}"
        published = False
        try:
            ready = workflow.start_activity(
                "wait_ready", ReadyCheck(url=url, model_id=input.engine.served_model_name,
                                         timeout_s=input.engine.startup_timeout_s),
                task_queue=node_task_queue(leader.node_id),
                start_to_close_timeout=timedelta(seconds=input.engine.startup_timeout_s + 60),
                heartbeat_timeout=RANK_HEARTBEAT, retry_policy=ONCE,
            )
            await workflow.wait([ready, *ranks.values()], return_when=asyncio.FIRST_COMPLETED)
            if ready.done() and ready.exception() is None and not any(t.done() for t in ranks.values()):
                await workflow.execute_activity(
                    "publish_replica",
                    ReplicaRecord(workflow_id=input.workflow_id, endpoint_id=input.endpoint_id,
                                  copy_id=input.copy_id, url=url),
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
            exit_info, was_interrupted = _rank_outcome(task, rank_index, self.nodes[rank_index])
            interrupted = interrupted or was_interrupted
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

    async def _stop_ranks(self, ranks: dict[int, asyncio.Task[RankExit]], published: bool, input: CopyInput) -> None:
        if published:
            await workflow.execute_activity(
                "unpublish_replica", input.copy_id, task_queue=CONTROL_TASK_QUEUE,
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


def _rank_outcome(task: asyncio.Task[RankExit], rank: int, node_id: str) -> tuple[RankExit, bool]:
    if task.cancelled():
        return RankExit(rank=rank, node_id=node_id, reason="cancelled"), False
    error = task.exception()
    if error is None:
        return task.result(), False
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError) and cause.type == "AgentStopped":
        return RankExit(rank=rank, node_id=node_id, reason="agent-stopped"), True
    if isinstance(cause, TimeoutError):
        return RankExit(rank=rank, node_id=node_id, reason="lost"), False
    return RankExit(rank=rank, node_id=node_id, reason="exited", log_tail=str(cause)), False
