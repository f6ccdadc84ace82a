"""Cluster events in the store (server/store/events.py) through the one writer (server/events.py `record`): filters,
the cursor, who sees which (alice never bob's), `once`, and pruning to the retention setting — on SQLite and on a
real PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from berth.contracts import EventKind
from berth.security import Cipher, Identity
from server.events import Audience, EventDraft, copy_workflow, record
from server.store.database import Store
from server.store.events import EventQuery, Retention
from server.store.tables import EndpointRow, EventRow, WorkflowRow

pytestmark = pytest.mark.timeout(120)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team_a",), org="acme")
BOB = Identity(user="bob", groups=("team-b",), org="acme")
CAROL = Identity(user="carol", groups=("teamxa",), org="other")  # `_` in alice's group must not match her `x`


@pytest.fixture
def store(store_url: str, tmp_path: Path) -> Store:
    store = Store(store_url, Cipher.load_or_create(tmp_path / "keys"))
    for workflow_id, who, scope in (("wf-alice", ALICE, "group"), ("wf-bob", BOB, "user")):
        with store.session() as s:
            s.add(WorkflowRow(id=workflow_id, entry="vLLM", owner=who.user, org=who.org, created_at=time.time(),
                              definition="", endpoint_id=f"ep-{workflow_id}"))
            s.add(EndpointRow(id=f"ep-{workflow_id}", workflow_id=workflow_id, service="pool", scope=scope,
                              owner=who.user, org=who.org, groups=list(who.groups), created_at=time.time()))
    return store


def _kinds(store: Store, who: Identity, **asked: object) -> list[str]:
    return [event.kind.value for event in store.events.page(who, EventQuery(**asked)).events]  # type: ignore[arg-type]


def _scripted(store: Store) -> None:
    record(store, EventDraft(EventKind.WORKFLOW_STARTED, "alice started wf-alice", workflow_id="wf-alice",
                             actor="alice"))
    record(store, EventDraft(EventKind.COPY_PLACED, "placed", workflow_id="wf-alice", copy_id="wf-alice.copy-0",
                             node_id="node-1"))
    record(store, EventDraft(EventKind.WORKFLOW_STARTED, "bob started wf-bob", workflow_id="wf-bob", actor="bob"))
    record(store, EventDraft(EventKind.NODE_JOINED, "node node-2 joined", audience=Audience.everyone(),
                             node_id="node-2"))
    record(store, EventDraft(EventKind.KEY_CREATED, "bob created a key", audience=Audience.of_user(BOB)))
    record(store, EventDraft(EventKind.ADMIN_BACKUP, "admin took a backup", audience=Audience.of_user(ADMIN)))


def test_each_caller_sees_what_their_scope_reaches_and_an_administrator_all(store: Store) -> None:
    _scripted(store)
    everything = ["workflow.started", "copy.placed", "workflow.started", "node.joined", "key.created",
                  "admin.backup"]
    assert _kinds(store, ADMIN) == everything
    # Alice: her workflow's, the node's; not bob's workflow (user scope) nor his key nor the backup.
    assert _kinds(store, ALICE) == ["workflow.started", "copy.placed", "node.joined"]
    assert _kinds(store, BOB) == ["workflow.started", "node.joined", "key.created"]
    # A member of alice's group (scope `group`) sees her workflow's events; a near-miss group name does not.
    assert _kinds(store, Identity(user="dave", groups=("team_a",), org="acme")) == [
        "workflow.started", "copy.placed", "node.joined"]
    assert _kinds(store, CAROL) == ["node.joined"]
    page = store.events.page(ALICE, EventQuery())
    assert page.events[0].endpoint_id == "ep-wf-alice" and page.events[0].actor == "alice"


def test_filters_and_the_cursor(store: Store) -> None:
    _scripted(store)
    assert _kinds(store, ADMIN, workflow_id="wf-alice") == ["workflow.started", "copy.placed"]
    assert _kinds(store, ADMIN, node_id="node-2") == ["node.joined"]
    assert _kinds(store, ADMIN, kinds=(EventKind.KEY_CREATED, EventKind.ADMIN_BACKUP)) == ["key.created",
                                                                                          "admin.backup"]
    assert _kinds(store, ADMIN, since=time.time() + 60) == []
    newest_two = store.events.page(ADMIN, EventQuery(limit=2))
    assert [e.kind.value for e in newest_two.events] == ["key.created", "admin.backup"] and not newest_two.more
    first = store.events.page(ADMIN, EventQuery(after=0, limit=4))
    assert first.more and first.next_after == first.events[-1].id
    rest = store.events.page(ADMIN, EventQuery(after=first.next_after, limit=4))
    assert [e.kind.value for e in rest.events] == ["key.created", "admin.backup"] and not rest.more
    idle = store.events.page(ADMIN, EventQuery(after=rest.next_after))
    assert (idle.events, idle.next_after) == ([], rest.next_after)
    # A read without a cursor that finds nothing still hands a follower the newest id, to read on from.
    assert store.events.page(CAROL, EventQuery(kinds=(EventKind.KEY_REVOKED,))).next_after == rest.next_after


def test_once_records_a_repeated_step_once_and_a_new_one_again(store: Store) -> None:
    def blocked(reason: str) -> EventDraft:
        return EventDraft(EventKind.PLACEMENT_BLOCKED, reason, workflow_id="wf-alice", copy_id="wf-alice.copy-1",
                          once=True)

    for draft in (blocked("no node has 2 free GPUs"), blocked("no node has 2 free GPUs"),
                  blocked("every node is draining"),
                  EventDraft(EventKind.COPY_PLACED, "placed", copy_id="wf-alice.copy-1", once=True),
                  EventDraft(EventKind.COPY_PLACED, "placed", copy_id="wf-alice.copy-1", once=True)):
        record(store, draft)
    assert _kinds(store, ADMIN) == ["placement.blocked", "placement.blocked", "copy.placed"]


def test_a_broken_event_is_dropped_and_the_caller_goes_on(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    # An endpoint whose scope is no scope: the audience cannot be made; `record` logs and returns.
    with store.session() as s:
        s.get(EndpointRow, "ep-wf-alice").scope = "nonsense"  # type: ignore[union-attr]
    record(store, EventDraft(EventKind.WORKFLOW_SCALED, "scaled", workflow_id="wf-alice"))
    assert _kinds(store, ADMIN) == [] and "event workflow.scaled not recorded" in caplog.text


def test_retention_drops_old_events_and_keeps_the_row_bound(store: Store) -> None:
    store.events.retention = Retention(keep_s=3600.0, max_rows=5)
    now = time.time()
    with store.session() as s:
        for index in range(8):
            s.add(EventRow(at=now - 7200 if index < 2 else now, kind="node.joined", message=f"event {index}",
                           node_id="node-1", groups="", scope="public", details={}))
    assert store.events.prune(now) == 3  # two older than an hour, then one more beyond the 5-row bound
    assert [e.message for e in store.events.page(ADMIN, EventQuery(after=0)).events] == [
        f"event {index}" for index in range(3, 8)]
    # Ids are never reused after a prune: a follower's cursor stays good.
    store.events.retention = Retention(keep_s=1.0, max_rows=1000)
    store.events.prune(now + 10)
    record(store, EventDraft(EventKind.NODE_OFFLINE, "node-1 went offline", audience=Audience.everyone()))
    assert store.events.page(ADMIN, EventQuery()).events[0].id == 9


def test_writes_prune_as_they_go(store: Store) -> None:
    store.events.retention = Retention(keep_s=3600.0, max_rows=50)
    for index in range(260):
        record(store, EventDraft(EventKind.NODE_JOINED, f"event {index}", audience=Audience.everyone()))
    kept = store.events.page(ADMIN, EventQuery(after=0, limit=1000)).events
    # Pruned on the 1st and the 201st write: at most the bound plus the writes since the last prune.
    assert 50 <= len(kept) <= 50 + 59 and kept[-1].message == "event 259"


def test_a_copy_names_its_workflow() -> None:
    assert copy_workflow("wf-alice.copy-12") == "wf-alice"
    assert copy_workflow("litellm-front") is None and copy_workflow("wf.copy-x") is None


def test_a_message_is_one_printable_line(store: Store) -> None:
    record(store, EventDraft(EventKind.KEY_CREATED, "alice created key \x1b[31mred\x1b[0m\nsecond line\tend",
                             audience=Audience.of_user(ALICE), details={"name": "a\x07b", "n": 3}))
    event = store.events.page(ADMIN, EventQuery()).events[0]
    assert event.message == "alice created key [31mred [0m second line end"
    assert event.details == {"name": "a b", "n": 3}
