"""A restore against a real Temporal dev server (the binary the project installs): the restored workflow's pool runs
under its own ID with its endpoint, and a second restore of the same backup (the store lost again, Temporal kept)
adopts that run instead of starting another. No control worker: a started pool waits for one, which is enough here."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from berth.api_client import ApiClient
from berth.security import Identity
from berth.settings import venv_bin
from berth.temporal import data_converter
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from server.app import build_context, create_app
from server.context import ServerContext
from server.submission import new_rows, with_generated_keys

pytestmark = pytest.mark.timeout(120)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")


@pytest.fixture
async def old(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path / "old", "127.0.0.1:1")
    context.store.create_user("alice", "acme", ["team"])
    entry = find_entry("GPT-OSS 20B")
    definition = with_generated_keys(render(entry, resolve_values(entry, {})))
    row, endpoint = new_rows(entry, definition, ALICE, "chat")
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    context.store.revisions.add_revision(row.id, 1, definition.model_dump(mode="json"), {}, ALICE.user)
    return context


@pytest.fixture
async def temporal(old: ServerContext) -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(venv_bin("temporal")),
                                                data_converter=data_converter(old.cipher))
    try:
        yield env
    finally:
        await env.shutdown()


def _client(context: ServerContext) -> ApiClient:
    return ApiClient("http://api", context.signing.api_token(ADMIN),
                     transport=httpx.ASGITransport(app=create_app(context)))


async def test_a_restored_pool_runs_and_a_second_restore_adopts_it(old: ServerContext, temporal: WorkflowEnvironment,
                                                                   tmp_path: Path) -> None:
    async with _client(old) as api:
        document = await api.backup()
    runs = []
    for attempt in ("first", "second"):
        shutil.copytree(old.state.keys, tmp_path / attempt / old.state.keys.name)
        fresh = build_context(tmp_path / attempt, "127.0.0.1:1")
        fresh._temporal = temporal.client
        async with _client(fresh) as api:
            [restored] = (await api.restore(document)).workflows
        assert (restored.id, restored.endpoint_id, restored.started) == ("chat", old.store.workflow("chat").endpoint_id,
                                                                         True)
        description = await temporal.client.get_workflow_handle("chat").describe()
        assert description.status == WorkflowExecutionStatus.RUNNING
        runs.append(description.run_id)
    assert runs[0] == runs[1]  # adopted, not started twice
    await temporal.client.get_workflow_handle("chat").terminate("test over")
