"""Cluster event contracts (`GET /v1/events`): one stream of what happened on the cluster — workflows started,
stopped and scaled, copies placed, ready, failed and stopped, placements blocked, nodes joined, offline and drained,
API keys created and revoked, policies set or refused, backups and restores — each a row the caller may see, in the
order they were recorded. docs/events.md says who sees which and how long they are kept."""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated

from pydantic import Field

from berth.contracts.base import Response
from berth.contracts.choices import MAX_EVENTS_PAGE as MAX_EVENTS_PAGE  # re-exported: defined apart for the CLI
from berth.errors import UserInputError

MAX_MESSAGE = 300  # a message is one line, cut here
MAX_DETAILS = 16  # keys of an event's details
MAX_DETAIL_TEXT = 200  # a detail's text value, cut here
DetailValue = Annotated[str, Field(max_length=MAX_DETAIL_TEXT)] | int | float | bool


class EventKind(str, Enum):
    """Every kind of cluster event, named `<subject>.<what happened>`: a closed registry, so a reader can filter on
    a kind it knows will come, and a new kind is a new member here (and a line in docs/events.md)."""

    WORKFLOW_STARTED = "workflow.started"  # a start was accepted and its pool workflow began
    WORKFLOW_STOPPED = "workflow.stopped"  # its owner (or an administrator) asked it to stop
    WORKFLOW_SCALED = "workflow.scaled"  # its desired copies changed: by hand or by its autoscaler
    WORKFLOW_UPDATED = "workflow.updated"  # a new revision was submitted: its rollout began
    COPY_PLACED = "copy.placed"  # a copy got its GPUs and ports (its nodes in details)
    COPY_READY = "copy.ready"  # a copy passed its readiness check and was published to the proxies
    COPY_FAILED = "copy.failed"  # a copy ended on its own (a rank exited, readiness failed, its node was lost)
    COPY_STOPPED = "copy.stopped"  # a copy ended on request (stop, scale-in, drain, rollout)
    PLACEMENT_BLOCKED = "placement.blocked"  # a copy waits for room; recorded once per reason, not per retry
    NODE_JOINED = "node.joined"  # a node agent's first heartbeat, or the first after the node was offline
    NODE_OFFLINE = "node.offline"  # its heartbeats stopped (or its agent said it is leaving)
    NODE_DRAINED = "node.drained"  # an administrator drained it: no new copies, its copies moved when asked
    NODE_UNDRAINED = "node.undrained"  # an administrator opened it to new copies again
    NODE_SLICED = "node.sliced"  # an administrator made a MIG slice of one of its GPUs (issue 36)
    NODE_UNSLICED = "node.unsliced"  # an administrator removed a MIG slice
    KEY_CREATED = "key.created"  # an API key (`bk_…`) was created
    KEY_REVOKED = "key.revoked"  # an API key was revoked
    POLICY_SET = "policy.set"  # a deploy policy or quota was set (issue 34, "Policies and quotas")
    POLICY_REFUSED = "policy.refused"  # a policy or quota refused a start or a scale
    ADMIN_BACKUP = "admin.backup"  # an administrator took a backup
    ADMIN_RESTORE = "admin.restore"  # an administrator restored a backup
    BUDGET_EXCEEDED = "budget.exceeded"  # a group's or organization's token or GPU-hour budget was passed


def _families() -> list[str]:
    return sorted({kind.value.split(".")[0] for kind in EventKind})


_NAMES = "|".join(re.escape(name) for name in sorted({kind.value for kind in EventKind} | set(_families()), key=len,
                                                     reverse=True))
# `GET /v1/events?kind=`: kinds (`copy.ready`) or families (`copy`: every copy.* kind), comma-separated.
EVENT_KINDS_PATTERN = rf"^\s*({_NAMES})(\s*,\s*({_NAMES}))*\s*$"


def event_kinds(text: str | None) -> tuple[EventKind, ...]:
    """`copy.ready,node` → copy.ready and every node.* kind; empty: () (any kind). An unknown name is refused in one
    line naming the families."""
    if text is None or not text.strip():
        return ()
    chosen: list[EventKind] = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        found = [kind for kind in EventKind if name in (kind.value, kind.value.split(".")[0])]
        if not found:
            shown = name if len(name) <= 40 else name[:40] + "…"
            raise UserInputError(f"'{shown}' is no event kind: give one of {', '.join(_families())} or a kind such "
                                 "as copy.ready (docs/events.md lists them).")
        chosen.extend(kind for kind in found if kind not in chosen)
    return tuple(chosen)


class EventRecord(Response):
    """One event as the caller may see it."""

    id: int = Field(ge=1)  # increasing: the cursor (`after`) a reader passes to read what came next
    at: float  # Unix time it was recorded
    kind: EventKind
    message: str  # one line
    workflow_id: str | None = None
    copy_id: str | None = None
    node_id: str | None = None
    endpoint_id: str | None = None
    actor: str | None = None  # the user who did it; None: the cluster itself (a node, a copy, a scheduler)
    details: dict[str, DetailValue] = Field(default_factory=dict, max_length=MAX_DETAILS)


class EventPage(Response):
    """Events after the cursor asked for, oldest first, and where the next read starts."""

    events: list[EventRecord]
    # Pass as `after` to read on: the last event returned; with none returned, the newest event recorded so far
    # (a read without `after`) or the `after` asked with, so that a follower never reads an event twice.
    next_after: int = Field(ge=0)
    # True when more matching events follow at once (the page was cut at `limit`).
    more: bool
