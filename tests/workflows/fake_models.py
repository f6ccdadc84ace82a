"""FakeModels: the registry and the nodes as a model job sees them, for ModelJobWorkflow tests — the
control-side activities (the registry's record, its reports, a serving workflow's use of a model, which
starts or joins the job as the API does) and the node activities, each scriptable and recorded."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from berth.contracts import EvictResult, ModelRecord, ModelState, ModelUseAnswer
from berth.settings import CONTROL_TASK_QUEUE
from server.model_jobs import job_workflow_id
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.model_payloads import (
    CheckedModel,
    CheckInput,
    DownloadedModel,
    DownloadInput,
    EvictInput,
    JobModel,
    ModelJobInput,
    ModelStep,
    ResolvedModel,
    ResolveInput,
    UseInput,
    VerifiedModel,
    VerifyInput,
)

DIGEST = "ab" * 32
COMMIT = "c0" * 20


@dataclass
class FakeModels:
    client: Client
    node_id: str
    spec: JobModel = field(default_factory=lambda: JobModel(
        model_id="m-1", name="smol", owner="alice", source_kind="hf", repo="org/smol", revision="main"))
    state: ModelState = ModelState.REGISTERED
    message: str | None = None
    job_id: str | None = None
    steps: list[ModelStep] = field(default_factory=list)
    calls: dict[str, list[Any]] = field(default_factory=dict)
    verified: bool = True
    check_error: str | None = None  # check_model raises this (a ModelScan refusal)
    download_gate: asyncio.Event = field(default_factory=asyncio.Event)  # the download ends once it is set

    def _record(self, name: str, argument: Any) -> None:
        self.calls.setdefault(name, []).append(argument)

    def called(self, name: str) -> list[Any]:
        return self.calls.get(name, [])

    def record(self) -> ModelRecord:
        return ModelRecord(id=self.spec.model_id, name=self.spec.name, scope="user", owner="alice", owner_key="alice",
                           source="hf://org/smol", state=self.state, message=self.message, job_id=self.job_id,
                           digest=DIGEST if self.state is ModelState.READY else None, created_at=0, updated_at=0)

    async def start_job(self, waiter: str | None = None) -> str:
        """As the API's use route: record a job unless one works, then signal-with-start it."""
        if self.job_id is None or self.state not in ModelState.working():
            # Recorded as working at once, as the registry does: a second use joins this job.
            self.job_id, self.state = uuid.uuid4().hex[:10], ModelState.RESOLVING
        job = ModelJobInput(model_id=self.spec.model_id, job_id=self.job_id)
        kwargs: dict[str, Any] = {"start_signal": "add_waiter", "start_signal_args": [waiter]} if waiter else {}
        await self.client.start_workflow("ModelJobWorkflow", job, id=job_workflow_id(self.job_id),
                                         task_queue=CONTROL_TASK_QUEUE, **kwargs)
        return self.job_id

    # --- control side -------------------------------------------------------------------------------
    @implements(stubs.load_model_job)
    async def load_model_job(self, model_id: str) -> JobModel:
        self._record("load_model_job", model_id)
        return self.spec

    @implements(stubs.report_model_state)
    async def report_model_state(self, step: ModelStep) -> None:
        self.steps.append(step)
        if step.job_id == self.job_id or self.job_id is None:
            self.state, self.message = step.state, step.message

    @implements(stubs.use_model)
    async def use_model(self, request: UseInput) -> ModelUseAnswer:
        self._record("use_model", request)
        if self.state is ModelState.READY:
            return ModelUseAnswer(model=self.record(), model_dir=f"/cache/sha256/{DIGEST}")
        if self.state is ModelState.FAILED:
            return ModelUseAnswer(model=self.record())
        job_id = await self.start_job(request.workflow_id)
        return ModelUseAnswer(model=self.record(), job_id=job_id)

    @implements(stubs.release_models)
    async def release_models(self, workflow_id: str) -> None:
        self._record("release_models", workflow_id)

    def control_activities(self) -> list[Callable[..., Any]]:
        return [self.load_model_job, self.report_model_state, self.use_model, self.release_models]

    # --- node side ----------------------------------------------------------------------------------
    @implements(stubs.resolve_model)
    async def resolve_model(self, request: ResolveInput) -> ResolvedModel:
        self._record("resolve_model", request)
        return ResolvedModel(commit=COMMIT, size_bytes=1000, files=3)

    @implements(stubs.download_model)
    async def download_model(self, request: DownloadInput) -> DownloadedModel:
        self._record("download_model", request)
        while not self.download_gate.is_set():
            activity.heartbeat()
            await asyncio.sleep(0.05)
        return DownloadedModel(node_id=self.node_id, staging="/cache/partial/org/smol/" + COMMIT, digest=DIGEST,
                               size_bytes=1000, files=3, bytes_transferred=1000, verified=self.verified,
                               unverified_files=[] if self.verified else ["config.json"])

    @implements(stubs.check_model)
    async def check_model(self, request: CheckInput) -> CheckedModel:
        self._record("check_model", request)
        if self.check_error:
            raise ApplicationError(self.check_error, type="ModelScan", non_retryable=True)
        return CheckedModel(model_dir=f"/cache/sha256/{DIGEST}", digest=DIGEST, files=3, safetensors_files=1,
                            size_bytes=1000)

    @implements(stubs.verify_model)
    async def verify_model(self, request: VerifyInput) -> VerifiedModel:
        self._record("verify_model", request)
        return VerifiedModel(ok=False, digest=DIGEST, problems=["model.safetensors: SHA-256 differs"])

    @implements(stubs.evict_model_cache)
    async def evict_model_cache(self, request: EvictInput) -> EvictResult:
        self._record("evict_model_cache", request)
        return EvictResult(budget_bytes=request.budget_bytes, before_bytes=0, after_bytes=0)

    def node_activities(self) -> list[Callable[..., Any]]:
        return [self.resolve_model, self.download_model, self.check_model, self.verify_model, self.evict_model_cache]
