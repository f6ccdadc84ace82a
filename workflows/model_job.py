"""ModelJobWorkflow: one model job, outside any HTTP request — Resolving (revision → commit) → Downloading
(resumable, on any node) → Verifying (every file against the source's checksums; the digest) → Scanning
(file count, pickles, format, signature; the bytes placed in the cache by digest) → Ready, or Failed with
the step's message. `verify` jobs recompute a Ready model's digest. Each step is written to the registry
(which shows it and ignores a stale job's reports) and signalled to every workflow waiting for the model.
ModelCacheWorkflow runs one cache eviction on a node."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from berth.contracts.model_registry import EvictResult, ModelState
    from berth.settings import CONTROL_TASK_QUEUE, NODES_TASK_QUEUE, node_task_queue
    from workflows import activity_stubs as stubs
    from workflows.model_payloads import (
        CheckedModel,
        CheckInput,
        DownloadedModel,
        DownloadInput,
        EvictInput,
        JobModel,
        ModelJobInput,
        ModelStep,
        ModelUpdate,
        ResolvedModel,
        ResolveInput,
        VerifiedModel,
        VerifyInput,
    )

# Refusals are final: retrying a pickle, a wrong signature or a full disk changes nothing.
FINAL_ERRORS = ["GatedModel", "ModelNotFound", "RevisionNotFound", "VolumeFull", "HubRequest", "ModelScan",
                "ModelSource", "SecretError", "ChecksumRequired", "WeightsError"]
NODE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                         maximum_attempts=8, non_retryable_error_types=FINAL_ERRORS)
REPORT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))
SHORT = timedelta(seconds=60)
# A killed node agent's download is noticed within this and retried (resuming) on another agent.
DOWNLOAD_HEARTBEAT = timedelta(seconds=20)


def _message(error: ActivityError) -> str:
    cause = error.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or error)


@workflow.defn(name="ModelJobWorkflow")
class ModelJobWorkflow:
    def __init__(self) -> None:
        self.waiters: list[str] = []
        self.told: dict[str, ModelState] = {}  # waiter → the last state it was sent
        self.update: ModelUpdate | None = None

    @workflow.signal
    def add_waiter(self, workflow_id: str) -> None:
        if workflow_id and workflow_id not in self.waiters and len(self.waiters) < 10_000:
            self.waiters.append(workflow_id)

    @workflow.query
    def current(self) -> ModelUpdate | None:
        return self.update

    @workflow.run
    async def run(self, input: ModelJobInput) -> ModelUpdate:
        spec: JobModel = await workflow.execute_activity(
            stubs.load_model_job, input.model_id, task_queue=CONTROL_TASK_QUEUE,
            start_to_close_timeout=SHORT, retry_policy=REPORT_RETRY)
        try:
            if input.kind == "verify":
                update = await self._verify(input, spec)
            else:
                update = await self._materialize(input, spec)
        except ActivityError as error:
            update = await self._step(input, spec, ModelStep(
                model_id=spec.model_id, job_id=input.job_id, state=ModelState.FAILED, message=_message(error)))
        except ApplicationError as error:
            update = await self._step(input, spec, ModelStep(
                model_id=spec.model_id, job_id=input.job_id, state=ModelState.FAILED, message=error.message))
        await self._tell_waiters()
        return update

    async def _materialize(self, input: ModelJobInput, spec: JobModel) -> ModelUpdate:
        job = input.job_id
        await self._step(input, spec, ModelStep(model_id=spec.model_id, job_id=job, state=ModelState.RESOLVING))
        resolved: ResolvedModel = await workflow.execute_activity(
            stubs.resolve_model, ResolveInput(job_id=job, spec=spec), 
            task_queue=NODES_TASK_QUEUE, start_to_close_timeout=timedelta(minutes=5), retry_policy=NODE_RETRY)
        await self._step(input, spec, ModelStep(model_id=spec.model_id, job_id=job, state=ModelState.DOWNLOADING,
                                                commit=resolved.commit, size_bytes=resolved.size_bytes,
                                                files=resolved.files))
        downloaded: DownloadedModel = await workflow.execute_activity(
            stubs.download_model, DownloadInput(job_id=job, spec=spec, resolved=resolved),
            task_queue=NODES_TASK_QUEUE, start_to_close_timeout=timedelta(hours=24),
            heartbeat_timeout=DOWNLOAD_HEARTBEAT, retry_policy=NODE_RETRY)
        await self._step(input, spec, ModelStep(model_id=spec.model_id, job_id=job, state=ModelState.VERIFYING,
                                                digest=downloaded.digest, verified=downloaded.verified))
        if spec.require_checksum and not downloaded.verified:
            shown = ", ".join(downloaded.unverified_files[:3]) or "its files"
            raise ApplicationError(f"model {spec.name} requires checksums, but the source publishes none for "
                                   f"{shown}; materialize it from a source that does, or drop --require-checksum",
                                   type="ChecksumRequired")
        await self._step(input, spec, ModelStep(model_id=spec.model_id, job_id=job, state=ModelState.SCANNING))
        checked: CheckedModel = await workflow.execute_activity(
            stubs.check_model, CheckInput(job_id=job, spec=spec, downloaded=downloaded), 
            # The staged bytes are on the node that downloaded them.
            task_queue=node_task_queue(downloaded.node_id), start_to_close_timeout=timedelta(hours=2),
            schedule_to_start_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=60),
            retry_policy=NODE_RETRY)
        return await self._step(input, spec, ModelStep(
            model_id=spec.model_id, job_id=job, state=ModelState.READY, digest=checked.digest,
            size_bytes=checked.size_bytes, files=checked.files, safetensors_files=checked.safetensors_files,
            verified=downloaded.verified), model_dir=checked.model_dir)

    async def _verify(self, input: ModelJobInput, spec: JobModel) -> ModelUpdate:
        await self._step(input, spec, ModelStep(model_id=spec.model_id, job_id=input.job_id,
                                                state=ModelState.VERIFYING))
        result: VerifiedModel = await workflow.execute_activity(
            stubs.verify_model, VerifyInput(job_id=input.job_id, spec=spec), 
            task_queue=NODES_TASK_QUEUE, start_to_close_timeout=timedelta(hours=2),
            heartbeat_timeout=timedelta(seconds=60), retry_policy=NODE_RETRY)
        if not result.ok:
            problems = "; ".join(result.problems[:5])
            more = f" (and {len(result.problems) - 5} more)" if len(result.problems) > 5 else ""
            raise ApplicationError(f"verify: model {spec.name} (digest {result.digest[:12]}…) changed on disk: "
                                   f"{problems}{more}; materialize it again", type="ModelScan")
        return await self._step(input, spec, ModelStep(model_id=spec.model_id, job_id=input.job_id,
                                                       state=ModelState.READY, digest=result.digest))

    async def _step(self, input: ModelJobInput, spec: JobModel, step: ModelStep,
                    model_dir: str | None = None) -> ModelUpdate:
        """Write the step to the registry, then tell the waiters (the registry is what they re-read)."""
        await workflow.execute_activity(stubs.report_model_state, step, task_queue=CONTROL_TASK_QUEUE,
                                        start_to_close_timeout=SHORT, retry_policy=REPORT_RETRY)
        self.update = ModelUpdate(model_id=spec.model_id, name=spec.name, state=step.state, message=step.message,
                                  digest=step.digest or (self.update.digest if self.update else None),
                                  model_dir=model_dir)
        await self._tell_waiters()
        return self.update

    async def _tell_waiters(self) -> None:
        """Signal each waiter the current state once (all at once); a waiter that has ended is skipped.
        Waiters that joined while the signals went out are told in the next round."""
        while self.update is not None:
            update = self.update
            due = [w for w in self.waiters if self.told.get(w) != update.state]
            if not due:
                return
            for waiter in due:
                self.told[waiter] = update.state
            await asyncio.gather(*(self._signal(waiter, update) for waiter in due))

    @staticmethod
    async def _signal(waiter: str, update: ModelUpdate) -> None:
        try:
            await workflow.get_external_workflow_handle(waiter).signal("model_update", update)
        except FailureError:
            pass  # it ended (stopped, failed): nothing to tell


@workflow.defn(name="ModelCacheWorkflow")
class ModelCacheWorkflow:
    """One eviction of the managed cache, on a node (the cache lives on the nodes' state dir)."""

    @workflow.run
    async def run(self, input: EvictInput) -> EvictResult:
        result: EvictResult = await workflow.execute_activity(
            stubs.evict_model_cache, input, task_queue=NODES_TASK_QUEUE,
            start_to_close_timeout=timedelta(minutes=10), retry_policy=RetryPolicy(maximum_attempts=3))
        return result


__all__ = ["ModelCacheWorkflow", "ModelJobWorkflow"]
