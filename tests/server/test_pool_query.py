"""server/pool_query.py: a status query that fails with the SDK's non-determinism code on a cold worker's
replay (temporalio/sdk-rust#1146) is asked again, a bounded number of times; any other failure is not."""

from __future__ import annotations

from typing import Any, cast

import pytest
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError

from server.pool_query import REPLAY_RETRIES, pool_status
from workflows.payloads import Phase, PoolStatus

GLITCH = "[TMPRL1100] Nondeterminism error: Activity machine does not handle this event: HistoryEvent(id: 59, " \
         "WorkflowExecutionUpdateAccepted)"
STATUS = PoolStatus(workflow_id="pool-1", phase=Phase.READY, desired_copies=1, copies=(), events=())


class Handle:
    """Answers the status query after `failures` failed answers with `message`."""

    def __init__(self, failures: int, message: str = GLITCH) -> None:
        self.failures, self.message, self.asked = failures, message, 0

    async def query(self, query: Any, rpc_timeout: Any = None) -> PoolStatus:
        self.asked += 1
        if self.asked <= self.failures:
            raise WorkflowQueryFailedError(self.message)
        return STATUS


def handle(fake: Handle) -> WorkflowHandle[Any, Any]:
    return cast("WorkflowHandle[Any, Any]", fake)


async def test_a_replay_glitch_is_asked_again_and_answers() -> None:
    fake = Handle(failures=REPLAY_RETRIES)
    assert await pool_status(handle(fake)) == STATUS
    assert fake.asked == REPLAY_RETRIES + 1


async def test_a_glitch_that_persists_is_raised_after_the_bounded_retries() -> None:
    fake = Handle(failures=REPLAY_RETRIES + 1)
    with pytest.raises(WorkflowQueryFailedError, match="TMPRL1100"):
        await pool_status(handle(fake))
    assert fake.asked == REPLAY_RETRIES + 1


async def test_any_other_query_failure_is_raised_at_once() -> None:
    fake = Handle(failures=1, message="the workflow's query handler raised")
    with pytest.raises(WorkflowQueryFailedError, match="query handler raised"):
        await pool_status(handle(fake))
    assert fake.asked == 1
