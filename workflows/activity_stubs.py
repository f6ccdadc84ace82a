"""Every activity a Berth workflow calls, as a typed stub: its name and signature, declared once.

Workflows call the stubs (`workflow.execute_activity(stubs.reserve_placement, request, …)`): the command
carries only the name, exactly as a string did, so recorded histories replay, and the stub's annotations
type the argument and the result. The implementations (activities/, the test fakes) register under the same
names with `@implements(stub)`; tests/workflows/test_activity_stubs.py fails when one drifts from its stub.

A stub's function name is its activity's name, recorded in every history that ran it: never rename one.
It lives in workflows/ (not berth/contracts) because its payload types do; it imports no I/O code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import activity

from berth.contracts import (
    CopyRecord,
    EndpointFront,
    FenceRequest,
    FrontPort,
    FrontPortRequest,
    ReserveRequest,
    ReserveResult,
    RevisionHealth,
)
from berth.contracts.model_registry import EvictResult, ModelUseAnswer
from workflows.model_payloads import (
    CheckedModel,
    CheckInput,
    DownloadedModel,
    DownloadInput,
    EvictInput,
    JobModel,
    ModelStep,
    ResolvedModel,
    ResolveInput,
    UseInput,
    VerifiedModel,
    VerifyInput,
)
from workflows.payloads import (
    CleanupInput,
    CopyInput,
    DrainInput,
    DrainResult,
    FrontExit,
    FrontInput,
    FrontRun,
    HealthCheck,
    LiveCheck,
    PoolInput,
    RankExit,
    RankSpec,
    ReadyCheck,
    WeightsInput,
    WeightsResult,
)
from workflows.rollout_payloads import HealthInput, ServeInput, TrafficInput
from workflows.slurm_payloads import SlurmCopyEnd, SlurmJobRef, SlurmJobView, SlurmReadyCheck, SlurmStartWait

ImplementationT = TypeVar("ImplementationT", bound=Callable[..., Awaitable[Any]])


class StubCalled(RuntimeError):
    """A stub ran as if it were its activity: a worker registered the stub instead of an implementation."""


def _stub() -> StubCalled:
    return StubCalled("an activity stub has no body: register the implementation (activities/) instead")


def activity_name(stub: Callable[..., Any]) -> str:
    """The name `stub`'s activity is scheduled and registered under."""
    return stub.__name__


def implements(stub: Callable[..., Any]) -> Callable[[ImplementationT], ImplementationT]:
    """Declare an implementation of `stub`'s activity (a worker's method or a test fake)."""
    return activity.defn(name=activity_name(stub))


# --- the control worker (server/worker.py): activities/control.py ----------------------------------------
@activity.defn
async def reserve_placement(request: ReserveRequest) -> ReserveResult:
    raise _stub()


@activity.defn
async def release_placement(copy_id: str) -> None:
    raise _stub()


@activity.defn
async def fence_placement(request: FenceRequest) -> None:
    raise _stub()


@activity.defn
async def publish_replica(record: CopyRecord) -> None:
    raise _stub()


@activity.defn
async def unpublish_replica(copy_id: str) -> None:
    raise _stub()


@activity.defn
async def remove_endpoint(request: CleanupInput) -> None:
    raise _stub()


@activity.defn
async def drain_replica(request: DrainInput) -> DrainResult:
    raise _stub()


@activity.defn
async def reserve_service_port(request: FrontPortRequest) -> FrontPort:
    raise _stub()


@activity.defn
async def set_endpoint_service(update: EndpointFront) -> None:
    raise _stub()


@activity.defn
async def set_traffic(request: TrafficInput) -> None:
    raise _stub()


@activity.defn
async def revision_health(request: HealthInput) -> RevisionHealth:
    raise _stub()


@activity.defn
async def serve_revision(request: ServeInput) -> None:
    raise _stub()


# --- the control worker: activities/authorization.py -------------------------------------------------------
@activity.defn
async def verify_service_input(input: PoolInput) -> None:
    raise _stub()


@activity.defn
async def verify_copy_parent(input: CopyInput) -> None:
    raise _stub()


@activity.defn
async def verify_front_parent(input: FrontInput) -> None:
    raise _stub()


# --- the control worker: activities/model_reports.py -------------------------------------------------------
@activity.defn
async def load_model_job(model_id: str) -> JobModel:
    raise _stub()


@activity.defn
async def report_model_state(step: ModelStep) -> None:
    raise _stub()


@activity.defn
async def use_model(request: UseInput) -> ModelUseAnswer:
    raise _stub()


@activity.defn
async def release_models(workflow_id: str) -> None:
    raise _stub()


# --- a node agent (node/agent.py): activities/ranks.py -----------------------------------------------------
@activity.defn
async def run_rank(spec: RankSpec) -> RankExit:
    raise _stub()


@activity.defn
async def adopt_rank(spec: RankSpec) -> RankExit:
    raise _stub()


@activity.defn
async def wait_ready(check: ReadyCheck) -> None:
    raise _stub()


@activity.defn
async def download_weights(request: WeightsInput) -> WeightsResult:
    raise _stub()


@activity.defn
async def delete_ephemeral_volume(workflow_id: str) -> None:
    raise _stub()


# --- a node agent: activities/fronts.py ---------------------------------------------------------------------
@activity.defn
async def run_service(run: FrontRun) -> FrontExit:
    raise _stub()


@activity.defn
async def adopt_service(run: FrontRun) -> FrontExit:
    raise _stub()


@activity.defn
async def wait_live(check: LiveCheck) -> float:
    raise _stub()


# --- a node agent: activities/model_jobs.py -----------------------------------------------------------------
@activity.defn
async def resolve_model(request: ResolveInput) -> ResolvedModel:
    raise _stub()


@activity.defn
async def download_model(request: DownloadInput) -> DownloadedModel:
    raise _stub()


@activity.defn
async def check_model(request: CheckInput) -> CheckedModel:
    raise _stub()


@activity.defn
async def verify_model(request: VerifyInput) -> VerifiedModel:
    raise _stub()


@activity.defn
async def evict_model_cache(request: EvictInput) -> EvictResult:
    raise _stub()


# --- the control worker, for copies placed as Slurm jobs (issue 35): activities/slurm_copies.py -----------------
@activity.defn
async def submit_slurm_copy(copy: CopyInput) -> SlurmJobRef:
    raise _stub()


@activity.defn
async def slurm_copy_state(job: SlurmJobRef) -> SlurmJobView:
    raise _stub()


@activity.defn
async def wait_slurm_copy_started(wait: SlurmStartWait) -> SlurmJobView:
    raise _stub()


@activity.defn
async def wait_slurm_copy_ready(check: SlurmReadyCheck) -> SlurmJobView:
    raise _stub()


@activity.defn
async def watch_slurm_copy(job: SlurmJobRef) -> SlurmCopyEnd:
    raise _stub()


@activity.defn
async def watch_slurm_copy_health(check: HealthCheck) -> str:
    raise _stub()


@activity.defn
async def cancel_slurm_copy(job: SlurmJobRef) -> None:
    raise _stub()


CONTROL_ACTIVITIES: tuple[Callable[..., Awaitable[Any]], ...] = (
    reserve_placement, release_placement, fence_placement, publish_replica, unpublish_replica, remove_endpoint,
    drain_replica, reserve_service_port, set_endpoint_service, set_traffic, revision_health, serve_revision,
    verify_service_input, verify_copy_parent, verify_front_parent,
    load_model_job, report_model_state, use_model, release_models,
)
SLURM_ACTIVITIES: tuple[Callable[..., Awaitable[Any]], ...] = (
    submit_slurm_copy, slurm_copy_state, wait_slurm_copy_started, wait_slurm_copy_ready, watch_slurm_copy,
    watch_slurm_copy_health, cancel_slurm_copy,
)
NODE_ACTIVITIES: tuple[Callable[..., Awaitable[Any]], ...] = (
    run_rank, adopt_rank, wait_ready, download_weights, delete_ephemeral_volume,
    run_service, adopt_service, wait_live,
    resolve_model, download_model, check_model, verify_model, evict_model_cache,
)
