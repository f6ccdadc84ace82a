"""The first thing a Berth workflow does: ask the control worker whether the Berth API started it, and end
at once, having done nothing, if not."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import Payload
    from berth.settings import CONTROL_TASK_QUEUE

UNAUTHORIZED = "UnauthorizedInput"  # the type activities/authorization.py refuses with
# A transient failure (the API's keys not loaded, Temporal busy) is retried; a refusal never.
VERIFY_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5),
                           maximum_attempts=10, non_retryable_error_types=[UNAUTHORIZED])
# Histories recorded before inputs were checked replay without the check.
PATCH = "authorized-input"

InputT = TypeVar("InputT", bound=Payload)


async def require_authorized(check: Callable[[InputT], Awaitable[None]], input: InputT) -> None:
    """Run the control worker's `check` activity (a stub) on this workflow's input; a refusal fails the workflow
    (non-retryable, with the check's one-line reason) before it has placed or started anything."""
    if not workflow.patched(PATCH):
        return
    try:
        await workflow.execute_activity(check, input, task_queue=CONTROL_TASK_QUEUE,
                                        start_to_close_timeout=timedelta(seconds=30), retry_policy=VERIFY_RETRY)
    except ActivityError as error:
        cause = error.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or error)
        raise ApplicationError(message, type=UNAUTHORIZED, non_retryable=True) from None


def refuse_signal(name: str) -> None:
    """A signal that arrived without its argument came from outside Berth (the codec checks only what is
    sent): drop it rather than fail the workflow task, which would wedge the workflow on it."""
    workflow.logger.warning("Refused signal %s without its argument: not sent by Berth", name)
