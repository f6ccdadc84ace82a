"""The workflow pages over the real app in-process. The rows are the store's (as a start writes them); what
Temporal would answer — the pool's status, a stop signal, a scale update — is a stand-in in this process, so
the page, the REST routes and their guards are the real ones. A real start → ready is the browser test's
(tests/console/test_console_browser.py, on a simulated stack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from berth.api_client import ApiClient
from berth.contracts import (
    DownloadProgress,
    ReserveRequest,
    Rollout,
    RolloutCommand,
    RolloutPhase,
    ScalingExplanation,
    WorkflowDescription,
    WorkflowEndpoint,
)
from berth.contracts.workflows import CopyInfo, CopyStatus, Event, Phase, PoolStatus
from berth.security import Identity
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from server.context import ServerContext
from server.submission import new_rows
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token
from workflows.payloads import ScaleResult

ENTRY = "SmolLM2 135M Instruct"
BOB = Identity(user="bob", groups=("default",), org="default")
COPY = "smol.copy-1"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass
class FakeTemporal:
    """Temporal as the describe, stop and scale routes ask it: one pool status per workflow."""

    statuses: dict[str, PoolStatus] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    refusal: str | None = None
    commands: list[str] = field(default_factory=list)

    def get_workflow_handle(self, workflow_id: str) -> Any:
        async def describe() -> Any:
            return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING,
                                   raw_description=SimpleNamespace(pending_activities=[]))

        async def query(*_args: Any, **_kwargs: Any) -> PoolStatus:
            return self.statuses[workflow_id]

        async def signal(*_args: Any) -> None:
            self.stopped.append(workflow_id)

        async def execute_update(_update: Any, request: Any, **_kwargs: Any) -> ScaleResult | Rollout:
            if self.refusal:
                raise WorkflowUpdateFailedError(ApplicationError(self.refusal))
            if isinstance(request, RolloutCommand):
                self.commands.append(request.action.value)
                rollout = self.statuses[workflow_id].rollout
                assert rollout is not None
                return rollout.model_copy(update={"phase": RolloutPhase.PAUSED, "message": "held by hand"})
            previous = self.statuses[workflow_id].desired_copies
            return ScaleResult(previous=previous, desired=request.replicas,
                               message=f"scaling from {previous} to {request.replicas} copies")

        return SimpleNamespace(id=workflow_id, describe=describe, query=query, signal=signal,
                               execute_update=execute_update)


@dataclass
class World:
    context: ServerContext
    temporal: FakeTemporal
    workflow_id: str
    endpoint_id: str


def add_workflow(context: ServerContext, who: Identity, name: str, values: dict[str, Any]) -> tuple[str, str]:
    entry = find_entry(ENTRY)
    definition = render(entry, resolve_values(entry, values))
    row, endpoint = new_rows(entry, definition, who, name)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    return row.id, endpoint.id


@pytest.fixture
def world(tmp_path: Path) -> World:
    context = console_context(tmp_path / "state")
    context.store.ensure_user("carol", org="default", groups=["default"], admin=False)
    temporal = FakeTemporal()
    context._temporal = temporal  # type: ignore[assignment]
    workflow_id, endpoint_id = add_workflow(context, BOB, "smol", {"Scope": "user"})
    temporal.statuses[workflow_id] = PoolStatus(
        workflow_id=workflow_id, phase=Phase.STARTING, desired_copies=1,
        copies=(CopyInfo(copy_id=COPY, status=CopyStatus.STARTING, nodes=("node-1",)),),
        events=(Event(at=AT.replace(second=9), kind="copy_started", message="ranks launched"),
                Event(at=AT, kind="placed", message="on node-1")),
        last_error="rank 0 exited once")
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "simulator",
                                            "gpus": [{"index": 0, "memory_gb": 80, "simulated": True},
                                                     {"index": 1, "memory_gb": 80, "simulated": True}]}, 30000)
    context.store.placements.reserve(ReserveRequest(workflow_id=workflow_id, copy_id=COPY, nodes=1,
                                                    gpus_per_node=1))
    logs = context.state.workflow_logs(workflow_id) / COPY
    logs.mkdir(parents=True)
    (logs / "rank-0.log").write_text("loading weights\nserving on :8000\n")
    return World(context, temporal, workflow_id, endpoint_id)


async def test_the_list_shows_what_the_user_may_see(world: World) -> None:
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "bob"))
        listed = (await client.get("/ui/workflows")).text
        assert 'tr data-id="smol"' in listed and 'class="phase state-starting">starting' in listed
        assert 'href="/ui/workflows/smol"' in listed and "UTC" in listed
        assert 'hx-get="/ui/workflows?live=1"' in listed
        table = (await client.get("/ui/workflows", params={"live": 1})).text
        assert table.startswith('<div id="workflows-live"') and "<nav" not in table
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "carol"))
        assert 'class="empty"' in (await client.get("/ui/workflows")).text


async def test_the_detail_page_shows_the_pool_and_its_live_part(world: World) -> None:
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "bob"))
        detail = (await client.get("/ui/workflows/smol")).text
        assert 'id="phase" class="state-starting">starting' in detail
        assert f'href="/ui/endpoints/{world.endpoint_id}"' in detail
        assert f'<tr data-id="{COPY}">' in detail and "node-1: 0" in detail  # the GPU it holds
        assert detail.index("on node-1") < detail.index("ranks launched")  # events newest last
        assert 'id="last-error" class="error" role="alert">rank 0 exited once' in detail
        assert 'hx-get="/ui/workflows/smol/live" hx-trigger="every 2s"' in detail
        assert '<option selected>rank-0</option>' in detail and "serving on :8000" in detail
        assert 'id="scale-form"' in detail and 'name="copies" type="number" min="0"' in detail
        assert "Stop workflow" in detail and 'id="revisions"' in detail
        world.temporal.statuses["smol"] = world.temporal.statuses["smol"].model_copy(
            update={"phase": Phase.READY, "last_error": None,
                    "copies": (CopyInfo(copy_id=COPY, status=CopyStatus.READY, nodes=("node-1",)),)})
        live = (await client.get("/ui/workflows/smol/live")).text
        assert live.startswith('<div id="live"') and 'id="phase" class="state-ready">ready' in live
        assert "last-error" not in live and "<nav" not in live


async def test_the_autoscaler_explanation_is_shown(world: World) -> None:
    explanation = ScalingExplanation(workflow_id="smol", at=1.0, desired=2, decision="scale_out",
                                     reason="queue 4.0 per copy is above 2.0")
    world.context.store.note_scaling(world.endpoint_id, explanation.model_dump(mode="json"), 0)
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "bob"))
        live = (await client.get("/ui/workflows/smol/live")).text
        assert "<strong>scale_out</strong> to 2 — queue 4.0 per copy is above 2.0" in live


async def test_a_rollout_shows_its_commands_and_a_command_is_sent(world: World) -> None:
    rollout = Rollout(from_revision=1, to_revision=2, phase=RolloutPhase.ROLLING, message="1 of 2 new copies ready",
                      by="bob", started_at=AT, updated_at=AT)
    world.temporal.statuses["smol"] = world.temporal.statuses["smol"].model_copy(update={"rollout": rollout})
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "bob"))
        detail = (await client.get("/ui/workflows/smol")).text
        assert 'id="rollout">Revision 1 → 2, rolling' in detail and "1 of 2 new copies ready" in detail
        assert 'id="rollout-pause"' in detail and 'id="rollout-rollback"' in detail
        assert 'id="rollout-resume"' not in detail  # not paused: nothing to resume
        csrf = csrf_of(detail)
        assert (await client.post("/ui/workflows/smol/rollout", data={"action": "pause"})).status_code == 403
        unknown = await client.post("/ui/workflows/smol/rollout", data={"csrf": csrf, "action": "explode"})
        assert unknown.status_code == 400 and "No rollout command &#39;explode&#39;" in unknown.text
        paused = await client.post("/ui/workflows/smol/rollout", data={"csrf": csrf, "action": "pause"})
        assert paused.status_code == 303 and world.temporal.commands == ["pause"]
        shown = (await client.get("/ui/workflows/smol")).text
        assert "Rollout pause: now paused. held by hand" in shown


async def test_download_progress_is_shown_while_weights_arrive(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    described = WorkflowDescription(
        id="smol", entry=ENTRY, owner="bob", created_at=0.0, endpoint=WorkflowEndpoint(id=world.endpoint_id, url="http://x"),
        phase="downloading", desired_copies=1, copies=(), events=(),
        download=DownloadProgress(bytes_done=2_000_000_000, bytes_total=8_000_000_000, rate_bps=50e6, eta_s=120,
                                  files_done=1, files_total=4))

    async def describe(_api: ApiClient, _workflow_id: str) -> WorkflowDescription:
        return described

    monkeypatch.setattr(ApiClient, "describe_workflow", describe)
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "bob"))
        live = (await client.get("/ui/workflows/smol/live")).text
        assert 'id="download">2.0 of 8.0 GB (25%), files 1 of 4, 50.0 MB/s, about 120 s left' in live
        assert '<progress id="download-progress" max="8000000000" value="2000000000">' in live


async def test_another_users_workflow_is_the_apis_not_found(world: World) -> None:
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "carol"))
        for path in ("/ui/workflows/smol", "/ui/workflows/smol/live"):
            answer = await client.get(path)
            assert 'role="alert"' in answer.text and "smol" in answer.text, path
        refused = await client.get("/ui/workflows/smol")
        assert refused.status_code == 404 and '"detail"' not in refused.text


async def test_stop_and_scale_need_csrf_and_show_the_apis_words(world: World) -> None:
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "bob"))
        csrf = csrf_of((await client.get("/ui/workflows/smol")).text)
        assert (await client.post("/ui/workflows/smol/stop")).status_code == 403
        assert (await client.post("/ui/workflows/smol/scale", data={"copies": "2"})).status_code == 403
        assert world.temporal.stopped == []
        scaled = await client.post("/ui/workflows/smol/scale", data={"csrf": csrf, "copies": "2"})
        assert scaled.status_code == 303 and scaled.headers["location"] == "/ui/workflows/smol"
        shown = (await client.get("/ui/workflows/smol")).text
        assert 'class="notice" role="status">scaling from 1 to 2 copies' in shown
        assert "scaling from 1 to 2" not in (await client.get("/ui/workflows/smol")).text  # shown once
        world.temporal.refusal = "at most 1 copy: MaxReplicas is 1"
        refused = await client.post("/ui/workflows/smol/scale", data={"csrf": csrf, "copies": "5"})
        assert refused.status_code == 400 and 'role="alert">at most 1 copy: MaxReplicas is 1' in refused.text
        assert 'name="copies" type="number" min="0" step="1" value="5"' in refused.text
        stopped = await client.post("/ui/workflows/smol/stop", data={"csrf": csrf})
        assert stopped.status_code == 303 and world.temporal.stopped == ["smol"]


async def test_a_user_who_may_not_stop_is_told_so(world: World) -> None:
    add_workflow(world.context, BOB, "smol-group", {})
    world.temporal.statuses["smol-group"] = PoolStatus(workflow_id="smol-group", phase=Phase.READY,
                                                       desired_copies=1, copies=(), events=())
    async with browser(world.context) as client:
        await sign_in(client, user_token(world.context, "carol"))
        csrf = csrf_of((await client.get("/ui/workflows/smol-group")).text)
        refused = await client.post("/ui/workflows/smol-group/stop", data={"csrf": csrf})
        assert refused.status_code == 403 and 'id="action-error" class="error" role="alert"' in refused.text
        assert world.temporal.stopped == []
