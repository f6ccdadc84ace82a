"""Supervised node activities (a rank, a service): one process a node agent owns for as long as it lives.
The process outlives its agent: when the agent goes silent, the workflow asks a restarted agent on the same
node to adopt the live process (adopt_rank, adopt_service), and calls it lost only when none does in time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from berth.settings import node_task_queue
    from workflows.payloads import CopyTimings

# A process is started once: if it dies, its workflow decides what next, never Temporal behind its back.
ONCE = RetryPolicy(maximum_attempts=1)
# A process re-adopted by restarted agents this many times in a row is given up as lost.
MAX_ADOPTIONS = 5

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


def start_supervised(activity: Callable[[ArgT], Awaitable[ResultT]], arg: ArgT, node_id: str, timings: CopyTimings,
                     *, adopting: bool) -> workflow.ActivityHandle[ResultT]:
    """Start `activity` (a stub: run_… or adopt_…) on the node's own queue; an adoption must be taken up by a
    restarted agent within the adopt window, or it ends with a schedule-to-start timeout."""
    return workflow.start_activity(
        activity, arg, task_queue=node_task_queue(node_id),
        start_to_close_timeout=timedelta(days=3650),
        heartbeat_timeout=timedelta(seconds=timings.rank_heartbeat_timeout_s),
        schedule_to_start_timeout=timedelta(seconds=timings.rank_adopt_window_s) if adopting else None,
        retry_policy=ONCE, cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )


def agent_went_silent(error: BaseException | None) -> bool:
    """The activity's node agent stopped heartbeating (killed, cut off): its process may live on."""
    cause = error.cause if isinstance(error, ActivityError) else None
    return isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT


def not_adopted(error: BaseException | None) -> bool:
    """An adoption no restarted agent took up within the adopt window."""
    cause = error.cause if isinstance(error, ActivityError) else None
    return isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START
