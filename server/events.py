"""Recording cluster events: `record(store, EventDraft(...))` is the one call every part of the control plane makes
(routes, the store's callers; never workflow code, which must stay deterministic). It is cheap (one insert) and never
fails its caller: an event that cannot be written is logged and dropped, and the caller's action goes on.

    record(context.store, EventDraft(EventKind.POLICY_SET, f"policy {name} set for group {group}",
                                     audience=Audience.of_group(org, group), actor=who.user))

An event with a `workflow_id` and no audience is seen as that workflow's endpoint is (its owner, and its scope's
groups, organization or everyone); one with neither, by administrators only. Blocking: from async code call it
through `run_in_threadpool`, as any store work."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from berth.contracts import EventKind
from berth.contracts.events import MAX_DETAIL_TEXT, MAX_DETAILS, MAX_MESSAGE
from berth.errors import NotFoundError
from berth.scopes import Scope
from berth.security import Identity
from server.store.database import Store
from server.store.events import groups_text
from server.store.tables import EndpointRow, EventRow

log = logging.getLogger(__name__)
Detail = str | int | float | bool
# Events of one subject that `once` compares with: a copy's life, a node's presence.
COPY_LIFE = (EventKind.COPY_PLACED, EventKind.COPY_READY, EventKind.COPY_FAILED, EventKind.COPY_STOPPED,
             EventKind.PLACEMENT_BLOCKED)
NODE_PRESENCE = (EventKind.NODE_JOINED, EventKind.NODE_OFFLINE)
OFFLINE_SCAN_EVERY_S = 5.0  # how often one API process looks for nodes whose heartbeats stopped


@dataclass(frozen=True)
class Audience:
    """Who may read an event besides administrators, stored with it: berth/scopes.py's rule over these fields."""

    scope: Scope = Scope.USER
    owner: str | None = None  # always sees it; None with scope USER: administrators only
    org: str | None = None
    groups: tuple[str, ...] = ()

    @classmethod
    def everyone(cls) -> Audience:
        """Every signed-in caller (node events: the cluster's shape is not secret, as `node list` shows it)."""
        return cls(scope=Scope.PUBLIC)

    @classmethod
    def of_user(cls, who: Identity | str) -> Audience:
        return cls(owner=who if isinstance(who, str) else who.user)

    @classmethod
    def of_group(cls, org: str, group: str) -> Audience:
        return cls(scope=Scope.GROUP, org=org, groups=(group,))

    @classmethod
    def of_org(cls, org: str) -> Audience:
        return cls(scope=Scope.ORGANIZATION, org=org)

    @classmethod
    def of_endpoint(cls, endpoint: EndpointRow) -> Audience:
        """As the endpoint's scope reads (its workflow's events)."""
        return cls(scope=Scope(endpoint.scope), owner=endpoint.owner, org=endpoint.org, groups=tuple(endpoint.groups))


@dataclass(frozen=True)
class EventDraft:
    """An event to record. `message`: one line (cut at 300); `details`: a few small typed facts (at most 16, texts
    cut at 200); `once`: record nothing when the subject's newest event of its kind's family (COPY_LIFE,
    NODE_PRESENCE, else its kind) is already this kind with this message — for callers that may say it again."""

    kind: EventKind
    message: str
    audience: Audience | None = None  # None: the workflow's (workflow_id), else administrators only
    workflow_id: str | None = None
    copy_id: str | None = None
    node_id: str | None = None
    endpoint_id: str | None = None
    actor: str | None = None  # the user who did it; None: the cluster did
    details: Mapping[str, Detail] = field(default_factory=dict)
    once: bool = False


def record(store: Store, draft: EventDraft) -> None:
    """Write the event; on any failure log one line and return: an event never fails the action it records."""
    try:
        row, family = _row(store, draft), _family(draft.kind) if draft.once else ()
        store.events.add(row, once_among=family)
    except Exception as error:  # noqa: BLE001 — history is worth less than the action it tells of
        log.warning("event %s not recorded: %s", draft.kind.value, type(error).__name__)


def _family(kind: EventKind) -> tuple[EventKind, ...]:
    return COPY_LIFE if kind in COPY_LIFE else NODE_PRESENCE if kind in NODE_PRESENCE else (kind,)


def _row(store: Store, draft: EventDraft) -> EventRow:
    audience, endpoint_id = draft.audience, draft.endpoint_id
    if audience is None:
        audience, found = workflow_audience(store, draft.workflow_id)
        endpoint_id = endpoint_id or found
    details = {printable(key)[:64]: printable(value)[:MAX_DETAIL_TEXT] if isinstance(value, str) else value
               for key, value in list(draft.details.items())[:MAX_DETAILS]}
    return EventRow(at=time.time(), kind=draft.kind.value, message=printable(draft.message)[:MAX_MESSAGE],
                    workflow_id=draft.workflow_id, copy_id=draft.copy_id, node_id=draft.node_id,
                    endpoint_id=endpoint_id, actor=draft.actor, owner=audience.owner, org=audience.org,
                    groups=groups_text(audience.groups), scope=audience.scope.value, details=details)


def printable(text: str) -> str:
    """One line with no control character: a message quotes names users chose (a key's), and a reader's terminal
    must not take any of it for an escape sequence."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def workflow_audience(store: Store, workflow_id: str | None) -> tuple[Audience, str | None]:
    """Who sees a workflow's events, and its endpoint: as its endpoint's scope reads; an endpoint gone (stopped):
    its owner; no such workflow: administrators only."""
    if workflow_id is None:
        return Audience(), None
    try:
        workflow = store.workflow(workflow_id)
    except NotFoundError:
        return Audience(), None
    try:
        return Audience.of_endpoint(store.endpoint(workflow.endpoint_id)), workflow.endpoint_id
    except NotFoundError:
        return Audience(owner=workflow.owner, org=workflow.org), workflow.endpoint_id


def copy_workflow(copy_id: str) -> str | None:
    """The workflow of a copy from its ID (`{workflow}.copy-{n}`, workflows/placement.py); None for another owner."""
    workflow_id, mark, index = copy_id.rpartition(".copy-")
    return workflow_id if mark and workflow_id and index.isdigit() else None


def note_offline_nodes(store: Store, now: float | None = None) -> None:
    """Record `node.offline` once for each node whose heartbeats stopped: where staleness is noticed, lazily (a node
    goes offline by saying nothing, so no request marks the moment). Cheap: nodes are read once, and only an offline
    node's newest presence event is looked at."""
    try:
        nodes = store.nodes()
        now = time.time() if now is None else now
        offline = [node for node in nodes if not store.placements.node_ready(node, now)]
    except Exception as error:  # noqa: BLE001 — as `record`: never the caller's failure
        log.warning("offline nodes not checked: %s", type(error).__name__)
        return
    noted = store.events.offline_noted
    for node in offline:
        # Told once per silence in this process: a node long gone is not looked up again on every scan.
        if noted.get(node.id) != node.last_heartbeat:
            record(store, node_offline(node.id, "its heartbeats stopped"))
            noted[node.id] = node.last_heartbeat
    for node_id in set(noted) - {node.id for node in offline}:
        noted.pop(node_id, None)


def node_offline(node_id: str, why: str) -> EventDraft:
    # One message whatever the cause, so that `once` finds the scan's and the leaving agent's the same event.
    return EventDraft(EventKind.NODE_OFFLINE, f"node {node_id} went offline", audience=Audience.everyone(),
                      node_id=node_id, details={"why": why}, once=True)
