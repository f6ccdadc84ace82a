"""Model jobs' control-side activities, through the API: read a job's model from the registry, write each
step back, and let a serving workflow take (and let go of) the model it serves."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from berth.api_client import ApiClient
from berth.contracts import ModelStateReport, ModelUse, ModelUseAnswer
from berth.errors import BerthError, NotFoundError, PermissionDeniedError, UserInputError
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.model_payloads import JobModel, ModelStep, UseInput


class ModelReportActivities:
    def __init__(self, api: ApiClient) -> None:
        self.api = api

    @implements(stubs.load_model_job)
    async def load_model_job(self, model_id: str) -> JobModel:
        try:
            spec = await self.api.model_job_spec(model_id)
        except NotFoundError as error:
            raise ApplicationError(str(error), type="ModelSource", non_retryable=True) from None
        model = spec.model
        return JobModel(model_id=model.id, name=model.name, owner=model.owner,
                        source_kind="path" if model.path else "hf", repo=model.repo, revision=model.revision,
                        path=model.path, require_checksum=model.require_checksum, signature=spec.signature,
                        format=model.format, hf_token_secret=spec.hf_token_secret, commit=model.commit,
                        allow_patterns=tuple(model.allow_patterns), ignore_patterns=tuple(model.ignore_patterns),
                        digest=model.digest)

    @implements(stubs.report_model_state)
    async def report_model_state(self, step: ModelStep) -> None:
        report = ModelStateReport(job_id=step.job_id, state=step.state, message=step.message, retries=step.retries,
                                  commit=step.commit, digest=step.digest, verified=step.verified,
                                  size_bytes=step.size_bytes, files=step.files,
                                  safetensors_files=step.safetensors_files)
        await self.api.report_model_state(step.model_id, report)

    @implements(stubs.use_model)
    async def use_model(self, request: UseInput) -> ModelUseAnswer:
        """The model a workflow serves: its record, and its directory once Ready (the job started or
        joined otherwise). A name the user may not use, or no such model: a final, one-line failure."""
        try:
            return await self.api.use_model(ModelUse(ref=request.ref, user=request.user,
                                                     workflow_id=request.workflow_id))
        except (NotFoundError, PermissionDeniedError, UserInputError) as error:
            raise ApplicationError(str(error), type="ModelSource", non_retryable=True) from None

    @implements(stubs.release_models)
    async def release_models(self, workflow_id: str) -> None:
        try:
            await self.api.release_models(workflow_id)
        except NotFoundError:
            pass  # nothing held
        except BerthError:
            raise
