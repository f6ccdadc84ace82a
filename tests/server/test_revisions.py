"""A workflow's revisions in the store (encrypted at rest, revision 1 made up for a workflow from before
revisions) and the next revision's preparation: the values merged, the generated key kept, the changes no
rollout can make refused, nothing written when nothing changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from berth.contracts import (
    PoolStatus,
    ReserveRequest,
    Rollout,
    RolloutKind,
    RolloutPhase,
    RolloutStrategy,
    WorkflowUpdateRequest,
)
from berth.errors import UserInputError
from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext
from server.revisions import NothingToChange, prepare_update
from server.routes.revisions import revision_state
from server.store.tables import RevisionRow, WorkflowRow
from server.submission import StartRequest, new_rows, prepare, with_generated_keys

ENTRY = "SmolLM2 135M Instruct"


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "vllm-cpu", "cpus": 8,
                                            "memory_gb": 32, "gpus": []}, port_start=30000)
    return context


@pytest.fixture
def alice(context: ServerContext) -> Identity:
    return context.store.ensure_user("alice", org="default", groups=["default"])


def start(context: ServerContext, who: Identity, values: dict[str, object], *,
          write_revision: bool = True) -> WorkflowRow:
    """What start_workflow does with the store, without Temporal."""
    entry, definition = prepare(context, StartRequest(entry=ENTRY, values=values), who)
    definition = with_generated_keys(definition)
    row, endpoint = new_rows(entry, definition, who)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    if write_revision:
        context.store.revisions.add_revision(row.id, 1, definition.model_dump(mode="json"), values, who.user)
    return context.store.workflow(row.id)


def test_a_revision_round_trips_and_is_encrypted_at_rest(context: ServerContext, alice: Identity) -> None:
    row = start(context, alice, {"MaxContextSize": 4096, "ApiKey": "sk-given-secret"})
    [first] = context.store.revisions.revisions(row)
    assert (first.revision, first.by, first.values["MaxContextSize"]) == (1, "alice", 4096)
    assert first.definition["api_key"] == "sk-given-secret"
    with context.store.session() as s:
        stored = s.scalars(select(RevisionRow)).one()
    assert "sk-given-secret" not in stored.definition and "sk-given-secret" not in stored.values
    assert context.store.revisions.latest(row).revision == 1
    assert context.store.revisions.revision(row, 2) is None


def test_a_workflow_from_before_revisions_reads_as_revision_1(context: ServerContext, alice: Identity) -> None:
    row = start(context, alice, {}, write_revision=False)
    [first] = context.store.revisions.revisions(row)
    assert (first.revision, first.by, first.at) == (1, "alice", row.created_at)
    assert first.definition == context.store.workflow_definition(row)


def test_the_next_revision_merges_values_and_keeps_the_generated_key(context: ServerContext, alice: Identity) -> None:
    row = start(context, alice, {"MaxContextSize": 4096})
    serving_key = context.store.revisions.latest(row).definition["api_key"]
    assert serving_key  # generated at start: a Proxy=true pool's LiteLLM master key
    number, definition, merged = prepare_update(
        context, row, WorkflowUpdateRequest(values={"MaxContextSize": 2048}), alice)
    assert number == 2 and merged["MaxContextSize"] == 2048
    assert definition.replica is not None and definition.replica.engine.max_model_len == 2048
    assert definition.api_key == serving_key


def test_equal_values_change_nothing(context: ServerContext, alice: Identity) -> None:
    row = start(context, alice, {"MaxContextSize": 4096})
    with pytest.raises(NothingToChange, match="nothing to change: the values equal revision 1's"):
        prepare_update(context, row, WorkflowUpdateRequest(values={"MaxContextSize": 4096}), alice)


@pytest.mark.parametrize(("values", "said"), [
    ({"Proxy": False}, "Proxy cannot change"),
    ({"Scope": "public"}, "Scope cannot change"),
])
def test_changes_no_rollout_can_make_are_refused(context: ServerContext, alice: Identity,
                                                 values: dict[str, object], said: str) -> None:
    row = start(context, alice, {})
    with pytest.raises(UserInputError, match=said):
        prepare_update(context, row, WorkflowUpdateRequest(values=values), alice)


def test_a_canary_behind_the_litellm_proxy_is_refused(context: ServerContext, alice: Identity) -> None:
    row = start(context, alice, {})
    body = WorkflowUpdateRequest(values={"MaxContextSize": 2048}, strategy=RolloutStrategy(kind=RolloutKind.CANARY))
    with pytest.raises(UserInputError, match="use --strategy rolling or blue-green"):
        prepare_update(context, row, body, alice)


def test_a_revision_state_follows_the_pool_status() -> None:
    def status(revision: int, phase: RolloutPhase | None) -> PoolStatus:
        base = PoolStatus.model_validate({"workflow_id": "wf", "phase": "ready", "desired_copies": 1, "copies": (),
                                       "events": ()})
        rollout = None if phase is None else Rollout(from_revision=1, to_revision=2, phase=phase,
                                                     started_at="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
                                                     updated_at="2026-01-01T00:00:00Z")  # type: ignore[arg-type]
        return base.model_copy(update={"revision": revision, "rollout": rollout})

    assert revision_state(1, None) == ""
    assert revision_state(1, status(1, RolloutPhase.ROLLING)) == "serving"
    assert revision_state(2, status(1, RolloutPhase.ROLLING)) == "rolling out"
    assert revision_state(2, status(1, RolloutPhase.ROLLED_BACK)) == "rolled back"
    assert revision_state(1, status(2, RolloutPhase.COMPLETE)) == "replaced"
    assert revision_state(2, status(2, RolloutPhase.COMPLETE)) == "serving"
    # Issue 31: a rolled-back revision stays "rolled back" after a later rollout completes (it never served).
    later = status(4, RolloutPhase.COMPLETE).model_copy(update={"rolled_back": (3,)})
    assert [revision_state(n, later) for n in (2, 3, 4)] == ["replaced", "rolled back", "serving"]


def test_an_update_after_a_rollback_builds_on_the_serving_revision(context: ServerContext, alice: Identity) -> None:
    """Issue 31: revision 3 (a failing ExtraArgs) was rolled back, revision 2 serves; the next update is
    revision 2's values plus what it names, never revision 3's."""
    row = start(context, alice, {"MaxContextSize": 4096})
    updates = ((2, {"MaxContextSize": 2048}), (3, {"MaxContextSize": 2048, "ExtraArgs": "--fail-share 0.6"}))
    for number, values in updates:
        _, definition, merged = prepare_update(context, row, WorkflowUpdateRequest(values=values), alice,
                                               serving_revision=number - 1)
        context.store.revisions.add_revision(row.id, number, definition.model_dump(mode="json"), merged, "alice")
    number, definition, merged = prepare_update(context, row, WorkflowUpdateRequest(values={"MaxContextSize": 8192}),
                                                alice, serving_revision=2)
    assert number == 4 and merged == {"MaxContextSize": 8192}
    assert definition.replica is not None and "--fail-share" not in definition.replica.engine.extra_args
    with pytest.raises(NothingToChange, match="revision 2"):  # equal to the serving revision, not the latest
        prepare_update(context, row, WorkflowUpdateRequest(values={"MaxContextSize": 2048}), alice,
                       serving_revision=2)


@asynccontextmanager
async def api_as(context: ServerContext, user: str) -> AsyncIterator[httpx.AsyncClient]:
    token = context.signing.api_token(context.store.identity(user), 600)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        yield api


async def test_the_routes_that_need_no_temporal(context: ServerContext, alice: Identity) -> None:
    """Equal values are answered without a rollout; an unknown revision names those that exist; the
    listing goes on without states when the pool cannot be asked (no Temporal here)."""
    row = start(context, alice, {"MaxContextSize": 4096})
    context.store.ensure_user("bob", org="default", groups=["default"])
    async with api_as(context, "alice") as api:
        same = await api.post(f"/v1/workflows/{row.id}/revisions", json={"values": {"MaxContextSize": 4096}})
        assert same.status_code == 200, same.text
        assert same.json()["rollout"] is None and same.json()["revision"] == 1
        assert "nothing to change" in same.json()["message"]
        missing = await api.get(f"/v1/workflows/{row.id}/revisions/7")
        assert missing.status_code == 404 and "Its revisions: 1." in missing.text
        shown = await api.get(f"/v1/workflows/{row.id}/revisions/1")
        assert shown.status_code == 200 and shown.json()["definition"]["api_key"]
        listed = await api.get(f"/v1/workflows/{row.id}/revisions")
        assert listed.status_code == 200, listed.text
        assert [(r["revision"], r["state"], r["by"]) for r in listed.json()] == [(1, "", "alice")]
    async with api_as(context, "bob") as api:
        refused = await api.post(f"/v1/workflows/{row.id}/revisions", json={"values": {"MaxContextSize": 2048}})
        assert refused.status_code in (403, 404) and "update it" in refused.text


def test_the_published_copies_on_a_node_by_workflow(context: ServerContext) -> None:
    for copy_id in ("wf-a.copy-1", "wf-a.copy-2", "wf-b.copy-1"):
        workflow_id = copy_id.split(".")[0]
        placed = context.store.placements.reserve(ReserveRequest(workflow_id=workflow_id, copy_id=copy_id, nodes=1,
                                                                 gpus_per_node=0))
        assert placed.placement is not None
        if copy_id != "wf-a.copy-2":  # reserved, never published: nothing to move
            assert context.store.placements.publish(workflow_id, "ep", copy_id, "http://127.0.0.1:1", True)
    assert context.store.placements.published_copies_on("node-1") == {"wf-a": ["wf-a.copy-1"], "wf-b": ["wf-b.copy-1"]}
    assert context.store.placements.published_copies_on("node-2") == {}


async def test_a_node_drained_with_a_grace_and_no_copies_needs_no_temporal(context: ServerContext) -> None:
    context.store.ensure_user("root", org="default", groups=["default"], admin=True)
    async with api_as(context, "root") as api:
        drained = await api.post("/v1/nodes/node-1/drain", json={"grace_s": 5})
        assert drained.status_code == 200 and drained.json()["state"] == "draining", drained.text
        undrained = await api.post("/v1/nodes/node-1/undrain")
        plain = await api.post("/v1/nodes/node-1/drain")  # without a body: as before
        assert undrained.status_code == plain.status_code == 200 and plain.json()["state"] == "draining"


def test_a_service_is_refused(context: ServerContext, alice: Identity) -> None:
    row = start(context, alice, {})
    service = {**context.store.revisions.latest(row).definition, "replica": None}
    context.store.revisions.add_revision(row.id, 2, service, {}, "alice")
    with pytest.raises(UserInputError, match="only replica pools roll to a new revision; stop and start a service"):
        prepare_update(context, row, WorkflowUpdateRequest(values={"MaxContextSize": 2048}), alice)
