"""A pool's registered model (`Model=model://NAME`): take it from the registry (which starts or joins its
model job), wait with an event per step while it materializes, fail with the job's message when it fails,
and serve the digest's directory once it is Ready. The job signals each step (`model_update`); a 30 s look
at the registry covers a signal that raced the job's end."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from berth.contracts.model_registry import ModelRecord, ModelState, ModelUseAnswer
    from berth.settings import CONTROL_TASK_QUEUE
    from workflows import activity_stubs as stubs
    from workflows.model_payloads import ModelUpdate, UseInput
    from workflows.payloads import Phase, PoolInput, WeightsResult
    from workflows.pool_state import PoolState

LOOK_AGAIN = timedelta(seconds=30)
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=15),
                    non_retryable_error_types=["ModelSource"])


def _failed(name: str, message: str | None) -> ApplicationError:
    return ApplicationError(f"model {name} failed: {message or 'no reason recorded'}; fix it and run "
                            f"`berth model materialize {name}`, then start the workflow again",
                            type="ModelFailed", non_retryable=True)


async def _use(input: PoolInput) -> ModelUseAnswer:
    ref = input.definition.model_ref or ""
    answer: ModelUseAnswer = await workflow.execute_activity(
        stubs.use_model, UseInput(ref=ref, user=input.owner.user, workflow_id=input.workflow_id),
        task_queue=CONTROL_TASK_QUEUE, start_to_close_timeout=timedelta(seconds=60),
        retry_policy=RETRY)
    return answer


def _waiting(state: PoolState, record: ModelRecord | ModelUpdate, shown: set[ModelState]) -> None:
    if record.state in shown:
        return
    shown.add(record.state)
    state.event("waiting_for_model", f"waiting for model {record.name} to materialize "
                                     f"({record.state.value})")


async def acquire_model(state: PoolState, input: PoolInput) -> str:
    """The model's directory once Ready ("" when a stop came first); raises when its job failed."""
    state.phase = Phase.DOWNLOADING
    answer = await _use(input)
    record, shown = answer.model, set[ModelState]()
    name = record.name
    model_dir, digest = answer.model_dir, record.digest
    while not (record.state is ModelState.READY and model_dir):
        if record.state is ModelState.FAILED:
            raise _failed(name, record.message)
        _waiting(state, record, shown)
        try:
            await workflow.wait_condition(lambda: state.model_news is not None or state.stop_requested,
                                      timeout=LOOK_AGAIN)
        except TimeoutError:
            pass
        if state.stop_requested:
            return ""
        news, state.model_news = state.model_news, None
        if news is None or (news.state is ModelState.READY and not news.model_dir):
            answer = await _use(input)  # a look at the registry: it has the job's outcome
            record, model_dir, digest = answer.model, answer.model_dir, answer.model.digest
            continue
        if news.state is ModelState.FAILED:
            raise _failed(name, news.message)
        if news.state is ModelState.READY:
            model_dir, digest = news.model_dir, news.digest
            break
        _waiting(state, news, shown)
    assert model_dir is not None
    state.weights = WeightsResult(model_dir=model_dir, bytes_total=record.size_bytes, cache_hit=not shown,
                                  digest=digest, model=input.definition.model_ref)
    state.event("model_ready", f"model {name} ready: digest sha256:{(digest or '?')[:12]}… in {model_dir}")
    state.phase = Phase.SCHEDULING
    return model_dir


async def release_model(input: PoolInput) -> None:
    await workflow.execute_activity(stubs.release_models, input.workflow_id, task_queue=CONTROL_TASK_QUEUE,
                                    start_to_close_timeout=timedelta(seconds=60), retry_policy=RETRY)
