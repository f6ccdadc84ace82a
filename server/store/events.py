"""Cluster events in the store: appended one row each (server/events.py `record` is the one writer), read a page at a
time by cursor with the filters and the visibility rule of `GET /v1/events`, and pruned to the retention setting
(BERTH_EVENTS_KEEP_DAYS, BERTH_EVENTS_MAX_ROWS) as they are written, so the table never grows without bound.

Who sees an event is decided in SQL, from the audience stored with it (owner, org, groups, scope), by the rule an
endpoint's scope follows (berth/scopes.py `in_scope`): its owner always, then its groups' members, its organization
or everyone; administrators every event."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, true
from sqlalchemy.orm import Session

from berth.contracts import EventKind, EventPage, EventRecord
from berth.scopes import Scope
from berth.security import Identity
from server.store.tables import EventRow

# Prune after every this many events written by this process: each prune is two indexed deletes, so its cost spread
# over the writes is small, and between prunes the table outgrows its bound by at most this many rows per process.
PRUNE_EVERY = 200
MAX_GROUPS_MATCHED = 64  # a caller's groups matched against an event's (one LIKE each); more are not looked at


@dataclass(frozen=True)
class Retention:
    """How long, and how many, events are kept (berth/settings ClusterSettings.events_keep_days, events_max_rows)."""

    keep_s: float = 30 * 86400.0
    max_rows: int = 1_000_000


@dataclass(frozen=True)
class EventQuery:
    """What `GET /v1/events` asks: filters (None: any), and where to start. No `after`: the newest `limit` events."""

    workflow_id: str | None = None
    node_id: str | None = None
    kinds: Sequence[EventKind] = ()
    since: float | None = None  # Unix time
    after: int | None = None
    limit: int = 100


def groups_text(groups: Sequence[str]) -> str:
    """An event's groups as stored: `|a|b|`, so one group is found with LIKE '%|a|%' on SQLite and Postgres alike."""
    return f"|{'|'.join(groups)}|" if groups else ""


def visible_to(who: Identity) -> ColumnElement[bool]:
    """The events `who` may read, as a WHERE clause: berth/scopes.py's rule over each event's stored audience."""
    if who.admin:
        return true()
    clauses: list[ColumnElement[bool]] = [
        EventRow.owner == who.user, EventRow.scope == Scope.PUBLIC.value,
        and_(EventRow.scope == Scope.ORGANIZATION.value, EventRow.org == who.org)]
    groups = who.groups[:MAX_GROUPS_MATCHED]
    if groups:
        clauses.append(and_(EventRow.scope == Scope.GROUP.value,
                            or_(*[EventRow.groups.contains(f"|{group}|", autoescape=True) for group in groups])))
    return or_(*clauses)


class EventLog:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session
        self.retention = Retention()  # the app sets the cluster's (server/app.py build_context)
        self._written = itertools.count()  # next() is atomic under the GIL: threads of one process share it
        self._due: dict[str, float] = {}
        # Offline nodes this process recorded, with the heartbeat they fell silent after (server/events.py).
        self.offline_noted: dict[str, float] = {}

    def add(self, row: EventRow, once_among: Sequence[EventKind] = ()) -> int | None:
        """Append an event; its id. With `once_among`: nothing (None) when the newest event of the same subject (its
        copy, else node, else workflow) among those kinds is this kind with this message — a retried reservation or a
        copy blocked for the same reason again is one event, not one per try."""
        with self._session() as s:
            if once_among and self._repeats(s, row, once_among):
                return None
            s.add(row)
            s.flush()
            added = row.id
        if next(self._written) % PRUNE_EVERY == 0:
            self.prune()
        return added

    @staticmethod
    def _repeats(s: Session, row: EventRow, kinds: Sequence[EventKind]) -> bool:
        subject = (EventRow.copy_id == row.copy_id if row.copy_id is not None
                   else EventRow.node_id == row.node_id if row.node_id is not None
                   else EventRow.workflow_id == row.workflow_id if row.workflow_id is not None else None)
        if subject is None:
            return False
        newest = s.execute(select(EventRow.kind, EventRow.message)
                           .where(subject, EventRow.kind.in_([kind.value for kind in kinds]))
                           .order_by(EventRow.id.desc()).limit(1)).first()
        return newest is not None and tuple(newest) == (row.kind, row.message)

    def prune(self, now: float | None = None) -> int:
        """Drop events older than the retention period, then the oldest beyond the row bound: ids only grow, so the
        bound is one range delete below the newest id less `max_rows`. The number of rows dropped."""
        now = time.time() if now is None else now
        with self._session() as s:
            old = s.execute(delete(EventRow).where(EventRow.at < now - self.retention.keep_s))
            dropped = int(old.rowcount or 0)  # type: ignore[attr-defined]
            newest = s.scalar(select(func.max(EventRow.id)))
            if newest is not None and newest > self.retention.max_rows:
                beyond = s.execute(delete(EventRow).where(EventRow.id <= newest - self.retention.max_rows))
                dropped += int(beyond.rowcount or 0)  # type: ignore[attr-defined]
        return dropped

    def due(self, what: str, every_s: float, now: float | None = None) -> bool:
        """True at most once per `every_s` for `what` in this process (a check that need not run on every call)."""
        now = time.monotonic() if now is None else now
        if now - self._due.get(what, -every_s) < every_s:
            return False
        self._due[what] = now
        return True

    def page(self, who: Identity, query: EventQuery) -> EventPage:
        """The events `who` may see that match: after the cursor, oldest first; without one, the newest `limit`."""
        conditions = [visible_to(who)]
        if query.workflow_id is not None:
            conditions.append(EventRow.workflow_id == query.workflow_id)
        if query.node_id is not None:
            conditions.append(EventRow.node_id == query.node_id)
        if query.kinds:
            conditions.append(EventRow.kind.in_([kind.value for kind in query.kinds]))
        if query.since is not None:
            conditions.append(EventRow.at >= query.since)
        matching = select(EventRow).where(*conditions)
        with self._session() as s:
            if query.after is None:
                rows = list(s.scalars(matching.order_by(EventRow.id.desc()).limit(query.limit)).all())[::-1]
                more = False
                start = rows[-1].id if rows else s.scalar(select(func.coalesce(func.max(EventRow.id), 0))) or 0
            else:
                rows = list(s.scalars(matching.where(EventRow.id > query.after).order_by(EventRow.id)
                                      .limit(query.limit + 1)).all())
                more, rows = len(rows) > query.limit, rows[:query.limit]
                start = rows[-1].id if rows else query.after
        return EventPage(events=[_record(row) for row in rows], next_after=start, more=more)


def _record(row: EventRow) -> EventRecord:
    return EventRecord(id=row.id, at=row.at, kind=EventKind(row.kind), message=row.message,
                       workflow_id=row.workflow_id, copy_id=row.copy_id, node_id=row.node_id,
                       endpoint_id=row.endpoint_id, actor=row.actor, details=row.details or {})
