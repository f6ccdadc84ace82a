"""Explain failure (`GET /v1/explain/failure/{id}`, docs/explain.md): pure functions from what Berth records of a
copy's end — its pool's events and copy list (the status query `berth workflow describe` shows), and its ranks'
log files under the state dir — to the FailureExplanation contract. What is not recorded stays None ("not
recorded"), never guessed from a message. No I/O: the route reads Temporal and the files."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from berth.contracts.explain import CopyEnd, CopyFailure, FailureExplanation, RankLog
from berth.contracts.workflows import CopyInfo, Event, PoolStatus

# The pool's events that record a copy ending or what came of it (workflows/pool_state.py, workflows/copy.py).
END_KINDS = frozenset({"copy_stopping", "copy_failed", "copy_interrupted", "copy_dropped", "copy_replaced",
                       "copy_drained"})
RANK_JOB = re.compile(r"^vllm-rank-(\d+)$")  # a rank's log job (workflows/copy.py `log_name`)
LOG_LINES = 15  # as many as a rank's exit report quotes (activities/ranks.py)
Redact = Callable[[str | None], str | None]


@dataclass(frozen=True)
class LogFile:
    """One job's log of a copy, read by the route: its last lines, or None when this reader may not see them."""

    job: str
    lines: list[str] | None


def copy_end(event: Event, redact: Redact) -> CopyEnd:
    ended = event.ended
    return CopyEnd(at=event.at, kind=event.kind, reason=redact(event.message) or "",
                   node=ended.node_id if ended else None, rank=ended.rank if ended else None,
                   exit_status=ended.exit_code if ended else None, signal=ended.signal if ended else None)


def rank_logs(files: Sequence[LogFile], nodes: Sequence[str]) -> tuple[list[RankLog], str | None]:
    """The logs this reader may see, each with its rank and that rank's node; and a note for those withheld."""
    shown, withheld = [], []
    for file in sorted(files, key=lambda f: f.job):
        if file.lines is None:
            withheld.append(file.job)
            continue
        match = RANK_JOB.match(file.job)
        rank = int(match.group(1)) if match else None
        node = nodes[rank] if rank is not None and rank < len(nodes) else None
        shown.append(RankLog(job=file.job, rank=rank, node=node, lines=file.lines))
    if withheld:
        return shown, f"the owner's only (they can hold secrets): {', '.join(withheld)}"
    return shown, None if files else "no log file recorded for this copy"


def copy_failure(copy_id: str, listed: CopyInfo | None, events: Sequence[Event], files: Sequence[LogFile],
                 redact: Redact) -> CopyFailure:
    nodes = list(listed.nodes) if listed is not None else []
    # A pool lists a copy's nodes only while it lists the copy; the rank that ended it says where it ran.
    for event in events:
        if not nodes and event.ended is not None and event.ended.rank == 0:
            nodes = [event.ended.node_id]
    logs, note = rank_logs(files, nodes)
    return CopyFailure(copy_id=copy_id, status=listed.status.value if listed else None,
                       detail=redact(listed.detail) if listed else None, nodes=nodes,
                       ends=[copy_end(e, redact) for e in events], logs=logs, log_note=note)


def explain_failure(workflow_id: str, copy_id: str | None, status: PoolStatus | None, unread: str | None,
                    logs: Mapping[str, Sequence[LogFile]], redact: Redact) -> FailureExplanation:
    """One copy (`copy_id`), or every copy the pool lists, its events name or its logs hold (`copy_id` None).
    `status` None: the pool's record could not be read, for the reason `unread`."""
    listed = {c.copy_id: c for c in status.copies} if status is not None else {}
    ends: dict[str, list[Event]] = {}
    for event in status.events if status is not None else ():
        if event.kind in END_KINDS and event.copy_id:
            ends.setdefault(event.copy_id, []).append(event)
    wanted = [copy_id] if copy_id is not None else sorted(listed.keys() | ends.keys() | logs.keys())
    copies = [copy_failure(c, listed.get(c), ends.get(c, []), logs.get(c, ()), redact) for c in wanted]
    note = None if status is not None else f"the pool's record could not be read ({unread}): its ends are not shown"
    return FailureExplanation(workflow_id=workflow_id, phase=status.phase.value if status is not None else None,
                              last_error=redact(status.last_error) if status is not None else None,
                              copies=copies, note=note)
