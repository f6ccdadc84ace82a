"""Runs PoolWorkflow and CopyWorkflow on a local Temporal dev server against a FakeCluster: the control
worker as control/worker.py builds it (same workflows, the real InputAuthority, the encrypting codec) with the
placement and node activities mocked, and inputs signed as the API signs them."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.authorization import InputAuthority
from berth.security import SigningKey, TokenVerifier
from berth.settings import CONTROL_TASK_QUEUE, NODES_TASK_QUEUE, node_task_queue
from catalog.definition import EngineSpec, PoolSpec, ReplicaSpec, WorkflowDefinition
from server.pool_query import pool_status
from tests.workflows.fake_cluster import FakeCluster
from tests.workflows.fake_models import FakeModels
from tests.workflows.fake_slurm import FakeSlurm
from workflows.copy import CopyWorkflow
from workflows.front import FrontWorkflow
from workflows.model_job import ModelCacheWorkflow, ModelJobWorkflow
from workflows.payloads import CopyTimings, Owner, PoolInput, PoolStatus, StopRequest
from workflows.pool_workflow import PoolWorkflow
from workflows.slurm_copy import SlurmCopyWorkflow

WAIT_S = 30.0  # the longest any condition below takes on a loaded machine, several times over
POLL_S = 0.1
# Short enough that a silent agent is noticed in seconds; a healthy fake agent heartbeats every 0.1 s, far
# inside it. The replacement back-off is kept, only shorter.
TIMINGS = CopyTimings(rank_heartbeat_timeout_s=2.0, rank_adopt_window_s=2.0, health_check_interval_s=0.0,
                      replace_backoff_s=0.1, replace_backoff_max_s=0.2)
OWNER = Owner(user="alice", groups=("ml",))


def pool_definition(min_replicas: int = 1, max_replicas: int | None = None, replace_failed_copies: int = 0,
                    nodes: int = 1, proxy: bool = False) -> WorkflowDefinition:
    """A model pool with no weights to fetch and (unless `proxy`) no LiteLLM proxy in front."""
    engine = EngineSpec(served_model_name="tiny-model", max_model_len=512, startup_timeout_s=120)
    return WorkflowDefinition(
        entry="tiny-model", name="tiny-model", model_id="tiny-model",
        replica=ReplicaSpec(nodes=nodes, gpus_per_node=1, engine=engine), proxy=proxy,
        pool=PoolSpec(min_replicas=min_replicas, max_replicas=max_replicas or max(min_replicas, 1),
                      replace_failed_copies=replace_failed_copies),
    )


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """The first truthy value of `check()` (sync or async), polled until `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_S)


@dataclass
class Harness:
    client: Client
    signing: SigningKey
    started: list[WorkflowHandle[Any, Any]] = field(default_factory=list)
    inputs: dict[str, PoolInput] = field(default_factory=dict)  # workflow id → what it was started with

    async def start(self, definition: WorkflowDefinition, timings: CopyTimings = TIMINGS,
                    placement_backend: Literal["berth", "slurm"] = "berth",
                    revision: int = 1) -> WorkflowHandle[Any, Any]:
        """Start a PoolWorkflow as the API does: on the control queue, its input signed."""
        workflow_id = f"pool-{uuid.uuid4().hex[:8]}"
        unsigned = PoolInput(workflow_id=workflow_id, endpoint_id=f"ep-{uuid.uuid4().hex[:10]}", owner=OWNER,
                             definition=definition, timings=timings, placement_backend=placement_backend,
                             revision=revision)
        grant = self.signing.workflow_grant(OWNER.user, workflow_id, unsigned.digest())
        signed = unsigned.model_copy(update={"grant": grant})
        handle = await self.client.start_workflow(PoolWorkflow.run, signed, id=workflow_id,
                                                  task_queue=CONTROL_TASK_QUEUE)
        self.inputs[workflow_id] = signed
        self.started.append(handle)
        return handle

    def latest(self, handle: WorkflowHandle[Any, Any]) -> WorkflowHandle[Any, Any]:
        """The workflow's current run: a pool that continued as new answers queries and signals there."""
        return self.client.get_workflow_handle(handle.id)

    async def status(self, handle: WorkflowHandle[Any, Any]) -> PoolStatus:
        return await pool_status(self.latest(handle))

    async def wait_status(self, handle: WorkflowHandle[Any, Any], condition: Callable[[PoolStatus], bool],
                          what: str, timeout_s: float = WAIT_S) -> PoolStatus:
        async def met() -> PoolStatus | None:
            status = await self.status(handle)
            return status if condition(status) else None

        try:
            status: PoolStatus = await eventually(met, what, timeout_s)
        except AssertionError as error:  # say where it was instead
            last = await self.status(handle)
            raise AssertionError(f"{error}; it was {last.phase.value} with copies "
                                 f"{[(c.copy_id, c.status.value) for c in last.copies]}, events "
                                 f"{[e.kind for e in last.events]}") from None
        return status

    async def settled(self, copy_ids: Iterable[str]) -> None:
        """Wait until each copy has no report to its pool in flight: every signal it sent is delivered and that
        delivery processed. A cancel (a stop, a scale-in) that lands in the same workflow task as a signal's
        delivery is lost (temporalio/sdk-python#620: the SDK's default flags resume the signal's await and drop
        the cancellation), and the copy then never stops; the tests cancel a copy only once it is settled."""
        async def quiet(copy_id: str) -> bool:
            events = [e.event_type for e in (await self.client.get_workflow_handle(copy_id).fetch_history()).events]

            def last(kind: EventType.ValueType) -> int:
                return max((index for index, event in enumerate(events) if event == kind), default=-1)

            processed = last(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
            sent = events.count(EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
            answered = events.count(EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED) + \
                events.count(EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED)
            return sent == answered and processed > last(EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED) \
                and processed > last(EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)

        for copy_id in copy_ids:
            await eventually(lambda copy_id=copy_id: quiet(copy_id), f"{copy_id}'s reports to its pool delivered")

    async def stop(self, handle: WorkflowHandle[Any, Any], timeout_s: float = WAIT_S) -> PoolStatus:
        await self.settled(copy_ids(await self.status(handle), ready_only=False))
        await self.latest(handle).signal(PoolWorkflow.stop, StopRequest(by=OWNER.user))
        status: PoolStatus = await asyncio.wait_for(handle.result(), timeout_s)
        return status

    def control_worker(self, cluster: FakeCluster, models: FakeModels | None = None,
                       slurm: FakeSlurm | None = None) -> Worker:
        """The control worker as control/worker.py builds it, over the cluster's control activities."""
        authority = InputAuthority(TokenVerifier.from_jwks(self.signing.jwks()), CONTROL_TASK_QUEUE)
        workflows = [PoolWorkflow, CopyWorkflow, SlurmCopyWorkflow, FrontWorkflow, ModelJobWorkflow,
                     ModelCacheWorkflow]
        extra = (models.control_activities() if models else []) + (slurm.activities() if slurm else [])
        return Worker(self.client, task_queue=CONTROL_TASK_QUEUE, workflows=workflows,
                      activities=[*cluster.control_activities(), authority.verify_service_input,
                                  authority.verify_copy_parent, authority.verify_front_parent, *extra])

    @contextlib.asynccontextmanager
    async def running(self, cluster: FakeCluster, models: FakeModels | None = None,
                      control: bool = True, slurm: FakeSlurm | None = None) -> AsyncIterator[Harness]:
        """The control worker and one worker per node, for the length of the block; whatever the test left
        running is terminated after it, so no workflow outlives its test. With `models`, the model jobs too
        (their node activities on the shared nodes queue and on `models.node_id`'s own). Without `control`,
        the node workers only: the test runs the control worker itself (`control_worker`), e.g. to restart it."""
        workers = [self.control_worker(cluster, models, slurm)] if control else []
        workers += [Worker(self.client, task_queue=node_task_queue(node.node_id), activities=cluster.node_activities(),
                           max_concurrent_activities=node.slots) for node in cluster.nodes]
        if models is not None:
            workers += [Worker(self.client, task_queue=queue, activities=models.node_activities())
                        for queue in (NODES_TASK_QUEUE, node_task_queue(models.node_id))]
        async with contextlib.AsyncExitStack() as stack:
            for worker in workers:
                await stack.enter_async_context(worker)
            try:
                yield self
            finally:
                await self._terminate_leftovers(cluster, slurm)

    async def _terminate_leftovers(self, cluster: FakeCluster, slurm: FakeSlurm | None = None) -> None:
        copies = {request.copy_id for request in cluster.called("reserve_placement")}
        copies |= set(slurm.jobs) if slurm else set()
        # Children are abandoned (not cancelled) when their pool closes: each is ended by ID.
        fronts = {f"{handle.id}.front" for handle in self.started}
        handles = [self.latest(h) for h in self.started]
        handles += [self.client.get_workflow_handle(child) for child in sorted(copies | fronts)]
        for handle in handles:
            try:
                description = await handle.describe()
            except RPCError:  # never started (a pool without a front process)
                continue
            if description.status is WorkflowExecutionStatus.RUNNING:
                await handle.terminate(reason="the test ended")


def node_ids(count: int) -> list[str]:
    """Node names unique to one test: each node's task queue is its own, never a previous test's."""
    run = uuid.uuid4().hex[:6]
    return [f"n{index}-{run}" for index in range(count)]


def copy_ids(status: PoolStatus, ready_only: bool = True) -> set[str]:
    return {c.copy_id for c in status.copies if not ready_only or c.status.value == "ready"}


def event_kinds(status: PoolStatus) -> list[str]:
    return [event.kind for event in status.events]
