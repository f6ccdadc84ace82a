"""A pool's status, read from its workflow by query — with the retry a cold worker's replay sometimes needs.

A query that reaches a worker without the pool in its cache (a restarted or new control worker) replays the
history first. The SDK's core can take such a replay for non-deterministic when an update arrived right after
a workflow task that produced no commands (a signal the pool only noted): it is unsure whether that task was a
heartbeat (temporalio/sdk-rust#1146, open). The next replay reads it right, and workflow tasks are retried
anyway; only the query that triggered the replay fails. So a query failing with the SDK's non-determinism code
is asked again, a bounded number of times; every other failure is the caller's to handle."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowQueryFailedError

from workflows.payloads import PoolStatus
from workflows.pool_workflow import PoolWorkflow

NONDETERMINISM = "[TMPRL1100]"  # the SDK's code for a replay that did not match its history
REPLAY_RETRIES = 2


async def pool_status(handle: WorkflowHandle[Any, Any], rpc_timeout: timedelta | None = None) -> PoolStatus:
    for attempt in range(REPLAY_RETRIES + 1):
        try:
            status: PoolStatus = await handle.query(PoolWorkflow.status, rpc_timeout=rpc_timeout)
            return status
        except WorkflowQueryFailedError as error:
            if NONDETERMINISM not in str(error) or attempt == REPLAY_RETRIES:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises
