"""`GET /v1/events` through the real app and the typed client, and the events the control plane's own routes record
as a copy lives (node joined, copy placed, blocked once, ready, failed; node drained, offline, back), as API keys
are created and revoked, and as a backup is taken: each caller reads only what they may; the filters and the query's
refusals are one line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import CopyInfo, CopyRecord, CopyStatus, EventPage, KeyCreateRequest, ReserveRequest
from berth.contracts.events import event_kinds
from berth.contracts.rollouts import ScalingExplanation
from berth.errors import UserInputError
from berth.security import Identity
from node.inventory import simulated_gpus
from server.app import build_context, create_app
from server.context import ServerContext
from server.copy_events import ended
from server.events import note_offline_nodes
from server.routes.events import since_time
from server.store.tables import EndpointRow, WorkflowRow

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
BOB = Identity(user="bob", groups=("other",), org="acme")


class _CopyHandle:
    def __init__(self, info: CopyInfo) -> None:
        self.info = info

    async def query(self, *_args: Any, **_kwargs: Any) -> CopyInfo:
        return self.info


class _Temporal:
    """What the release route asks of Temporal: a copy workflow's `info` query, answered as the copy ended."""

    def __init__(self) -> None:
        self.copies: dict[str, CopyInfo] = {}

    def get_workflow_handle(self, workflow_id: str) -> _CopyHandle:
        return _CopyHandle(self.copies[workflow_id])


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")
    context._temporal = _Temporal()  # type: ignore[assignment]
    for who, scope in ((ALICE, "user"), (BOB, "user")):
        context.store.ensure_user(who.user, org=who.org, groups=list(who.groups))
        with context.store.session() as s:
            s.add(WorkflowRow(id=f"wf-{who.user}", entry="vLLM", owner=who.user, org=who.org, created_at=time.time(),
                              definition="", endpoint_id=f"ep-{who.user}"))
            s.add(EndpointRow(id=f"ep-{who.user}", workflow_id=f"wf-{who.user}", service="pool", scope=scope,
                              owner=who.user, org=who.org, groups=list(who.groups), created_at=time.time()))
    return context


def _client(context: ServerContext, who: Identity) -> ApiClient:
    return ApiClient("http://api", context.signing.api_token(who),
                     transport=httpx.ASGITransport(app=create_app(context)))


def _inventory(node_id: str, gpus: str = "2x80GB", leaving: bool = False) -> dict[str, Any]:
    return {"address": "127.0.0.1", "engine": "simulator", "gpus": simulated_gpus(gpus, node_id), "port_start": 30000,
            "leaving": leaving}


def _seen(page: EventPage) -> list[tuple[str, str | None]]:
    return [(event.kind.value, event.copy_id or event.node_id or event.workflow_id) for event in page.events]


async def test_a_copy_and_its_node_as_events(context: ServerContext) -> None:
    copy_id, request = "wf-alice.copy-0", ReserveRequest(workflow_id="wf-alice", copy_id="wf-alice.copy-0", nodes=1,
                                                          gpus_per_node=2)
    big = ReserveRequest(workflow_id="wf-alice", copy_id="wf-alice.copy-1", nodes=1, gpus_per_node=8)
    context._temporal.copies[copy_id] = CopyInfo(  # type: ignore[union-attr]
        copy_id=copy_id, status=CopyStatus.FAILED,
        detail="copy stopped as a unit: rank 0 exited 1; last lines of its log:\nsecret-ish line")
    async with _client(context, ADMIN) as api:
        await api.heartbeat_node("node-1", _inventory("node-1"))
        await api.heartbeat_node("node-1", _inventory("node-1"))  # a node already up joins once
        await api.reserve(request)
        await api.reserve(request)  # an activity's retry: the same placement, one event
        await api.reserve(big)
        await api.reserve(big)  # still blocked for the same reason: one event
        await api.publish_replica(CopyRecord(workflow_id="wf-alice", endpoint_id="ep-alice", copy_id=copy_id,
                                             url="http://127.0.0.1:30000"))
        await api.release(copy_id)
        await api.release(copy_id)  # retried: nothing was held, nothing more to tell
        await api.set_node_draining("node-1", True)
        await api.heartbeat_node("node-1", _inventory("node-1", leaving=True))
        await api.heartbeat_node("node-1", _inventory("node-1"))
        everything = await api.events(after=0)
    assert _seen(everything) == [
        ("node.joined", "node-1"), ("copy.placed", copy_id), ("placement.blocked", "wf-alice.copy-1"),
        ("copy.ready", copy_id), ("copy.failed", copy_id), ("node.drained", "node-1"), ("node.offline", "node-1"),
        ("node.joined", "node-1")]
    placed, failed = everything.events[1], everything.events[4]
    assert placed.message == f"copy {copy_id} placed on node-1 (GPUs 0, 1)" and placed.node_id == "node-1"
    assert failed.message == f"copy {copy_id} failed: copy stopped as a unit: rank 0 exited 1"  # no log lines
    assert failed.workflow_id == "wf-alice" and failed.endpoint_id == "ep-alice" and failed.details == {
        "status": "failed"}
    async with _client(context, ALICE) as api:
        mine = await api.events(after=0)
        assert _seen(mine) == _seen(everything)  # her copy's events and every node's
        assert _seen(await api.events(workflow="wf-alice", kind="copy")) == [
            ("copy.placed", copy_id), ("copy.ready", copy_id), ("copy.failed", copy_id)]
        assert [e.kind.value for e in (await api.events(node="node-1", kind="node.offline,node.drained")).events] == [
            "node.drained", "node.offline"]
    async with _client(context, BOB) as api:
        assert [kind for kind, _ in _seen(await api.events())] == [
            "node.joined", "node.drained", "node.offline", "node.joined"]  # never alice's copies


async def test_keys_and_backups_are_seen_by_whom_they_concern(context: ServerContext) -> None:
    async with _client(context, ALICE) as api:
        issued = await api.create_key(KeyCreateRequest(name="laptop", endpoint_id="ep-alice"))
    async with _client(context, ADMIN) as api:
        await api.revoke_key(issued.record.id)  # an administrator revokes alice's key: alice is told
        await api.backup()
    async with _client(context, ALICE) as api:
        page = await api.events()
        assert [(e.kind.value, e.actor) for e in page.events] == [("key.created", "alice"), ("key.revoked", "admin")]
        assert f"API key {issued.record.id} (laptop)" in page.events[1].message
        assert issued.key not in str(page.model_dump())  # the plaintext key never
    async with _client(context, BOB) as api:
        assert (await api.events()).events == []
    async with _client(context, ADMIN) as api:
        assert [e.kind.value for e in (await api.events(kind="admin")).events] == ["admin.backup"]


async def test_a_node_whose_heartbeats_stopped_is_offline_once(context: ServerContext) -> None:
    async with _client(context, ADMIN) as api:
        await api.heartbeat_node("node-2", _inventory("node-2"))
    later = time.time() + context.settings.node_offline_after_s + 1
    note_offline_nodes(context.store, later)
    note_offline_nodes(context.store, later + 30)
    async with _client(context, BOB) as api:
        page = await api.events(node="node-2")
    assert _seen(page) == [("node.joined", "node-2"), ("node.offline", "node-2")]
    assert page.events[1].message == "node node-2 went offline" and page.events[1].details == {
        "why": "its heartbeats stopped"}


async def test_follow_reads_on_from_the_cursor(context: ServerContext) -> None:
    async with _client(context, ADMIN) as api:
        first = await api.events()
        assert (first.events, first.next_after) == ([], 0)
        await api.heartbeat_node("node-3", _inventory("node-3"))
        page = await api.events(after=first.next_after)
        assert _seen(page) == [("node.joined", "node-3")] and page.next_after == page.events[0].id
        assert (await api.events(after=page.next_after)).events == []


async def test_a_query_outside_the_document_is_refused(context: ServerContext) -> None:
    async with _client(context, ALICE) as api:
        for asked in ({"kind": "copies"}, {"kind": "copy,"}, {"since": "yesterday"}, {"since": "nan"},
                      {"limit": 1001}):
            with pytest.raises(UserInputError, match="The request is malformed at query"):
                await api.events(**asked)  # type: ignore[arg-type]
        assert (await api.events(kind=" copy.ready , node", since="1769860800.5")).events == []


def test_since_reads_durations_and_unix_times() -> None:
    assert since_time("1h", now=10_000.0) == 6400.0
    assert since_time(" 1769860800 ") == 1769860800.0 and since_time(None) is None


def test_kinds_are_named_or_a_family() -> None:
    assert [kind.value for kind in event_kinds("copy.ready, node")] == [
        "copy.ready", "node.joined", "node.offline", "node.drained", "node.undrained", "node.sliced", "node.unsliced"]
    assert event_kinds(None) == () and event_kinds(" ") == ()
    with pytest.raises(UserInputError, match="'copies' is no event kind: give one of admin, budget, copy, key, "):
        event_kinds("copy.ready,copies")


def test_a_copy_ended_on_request_or_unread_is_stopped() -> None:
    stopped = ended("wf.copy-0", CopyInfo(copy_id="wf.copy-0", status=CopyStatus.STOPPED, detail="stopped"))
    assert (stopped.kind.value, stopped.message) == ("copy.stopped", "copy wf.copy-0 ended: stopped")
    unread = ended("wf.copy-0", None)
    assert unread.kind.value == "copy.stopped" and unread.details == {"status": "unknown"}
    lost = ended("wf.copy-0", CopyInfo(copy_id="wf.copy-0", status=CopyStatus.INTERRUPTED, detail=""))
    assert (lost.kind.value, lost.message) == ("copy.failed", "copy wf.copy-0 failed: interrupted")


async def test_the_autoscalers_resize_is_one_event(context: ServerContext) -> None:
    def decided(at: float, decision: str, desired: int) -> ScalingExplanation:
        return ScalingExplanation(workflow_id="wf-alice", at=at, desired=desired, decision=decision,
                                  reason="queue 4.0 > 2.0 per copy" if decision == "scale_out" else "steady")

    async with _client(context, ADMIN) as api:
        # Posted again 6 s later (written: the explanation is rewritten every 5 s) before the pool was resized.
        for explanation in (decided(100, "scale_out", 2), decided(106, "scale_out", 2), decided(107, "hold", 2)):
            await api.record_scaling(explanation)
    async with _client(context, ALICE) as api:
        page = await api.events(workflow="wf-alice")
    assert [(e.kind.value, e.message, e.actor) for e in page.events] == [
        ("workflow.scaled", "the autoscaler scaled wf-alice to 2 copies: queue 4.0 > 2.0 per copy", None)]
    assert page.events[0].details == {"copies": 2, "decision": "scale_out"}
