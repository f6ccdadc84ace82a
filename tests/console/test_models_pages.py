"""The model pages over the real app (in-process; the model jobs are a recording fake, as in
tests/server/test_models_registry.py, so no Temporal runs): the empty state, the register form with the
API's refusals beside it, a model's page with its buttons, a job shown live, and the scope rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from berth.contracts import ModelRecord
from server.context import ServerContext
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token

SMOL = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"
DIGEST = "ab" * 32


@dataclass
class RecordingStarter:
    """The model jobs, faked: what was asked to start."""

    started: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(self, _context: ServerContext, record: ModelRecord, kind: str, _job_id: str,
                       _waiter: str | None = None) -> None:
        self.started.append((record.name, kind))


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = console_context(tmp_path / "state")
    context.model_jobs = RecordingStarter()
    return context


async def register(client: httpx.AsyncClient, **fields: str) -> httpx.Response:
    csrf = csrf_of((await client.get("/ui/models")).text)
    return await client.post("/ui/models", data={"csrf": csrf, **fields})


def bearer(context: ServerContext) -> dict[str, str]:
    return {"Authorization": f"Bearer {user_token(context, 'admin')}"}


async def report(context: ServerContext, name: str, path: str, body: dict[str, object]) -> None:
    """What a model job's activities send the control plane, as Berth's own service (the administrator)."""
    headers = bearer(context)
    async with browser(context) as api:
        found = (await api.get(f"/v1/models/{name}", headers=headers)).json()
        answer = await api.put(f"/v1/internal/models/{found['id']}/{path}", json=body, headers=headers)
        assert answer.status_code == 204, answer.text


async def test_register_materialize_and_follow_a_job(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        empty = (await client.get("/ui/models")).text
        assert 'class="empty">No models registered yet' in empty and 'id="model-form"' in empty
        no_csrf = await client.post("/ui/models", data={"name": "m", "source": SMOL})
        assert no_csrf.status_code == 403 and (await client.get("/ui/models/m")).status_code == 404
        made = await register(client, name="m", source=f"{SMOL}@main", scope="user", format="safetensors",
                              include="*.safetensors\n*.json", license="apache-2.0")
        assert made.status_code == 303 and made.headers["location"] == "/ui/models/m"
        listed = (await client.get("/ui/models")).text
        assert 'tr data-id="m"' in listed and "HuggingFaceTB/SmolLM2-135M-Instruct" in listed and ">main<" in listed
        detail = (await client.get("/ui/models/m")).text
        assert 'id="model-state" class="state-registered">Registered' in detail
        assert 'id="materialize-form"' in detail and 'id="verify-form"' not in detail
        assert "*.safetensors, *.json" in detail
        csrf = csrf_of(detail)
        refused = await client.post("/ui/models/m/verify", data={"csrf": csrf})
        assert refused.status_code == 400
        assert 'id="action-error" class="error" role="alert">Model m has no digest' in refused.text
        assert (await client.post("/ui/models/m/materialize", data={"csrf": csrf})).status_code == 303
        assert isinstance(context.model_jobs, RecordingStarter) and context.model_jobs.started == [("m", "materialize")]
        live = (await client.get("/ui/model-jobs/live")).text
        assert live.startswith('<div id="live" hx-get="/ui/model-jobs/live" hx-trigger="every 3s"')
        assert "<html" not in live and ">Resolving<" in live and ">materialize<" in live
        job_id = (await client.get("/v1/model-jobs", headers=bearer(context))).json()[0]["job_id"]
        await report(context, "m", "progress", {"job_id": job_id, "progress": {"bytes_done": 512, "bytes_total": 1024}})
        working = (await client.get("/ui/models/m/live")).text
        assert 'value="50"' in working and "512 B of 1.0 KiB" in working and 'id="materialize-form"' not in working
        await report(context, "m", "state", {"job_id": job_id, "state": "Ready", "digest": DIGEST, "size_bytes": 2048})
        ready = (await client.get("/ui/models/m/live")).text
        assert ">Ready<" in ready and DIGEST in ready and 'id="verify-form"' in ready and "Materialize again" in ready
        assert f"<code>{DIGEST[:12]}</code>" in (await client.get("/ui/models")).text


async def test_a_refused_registration_shows_the_api_words_and_keeps_the_values(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        bad_source = await register(client, name="m", source="hf://not-a-repo", license="mit", require_checksum="on")
        assert bad_source.status_code == 400 and 'id="model-error" class="error" role="alert">' in bad_source.text
        assert 'value="hf://not-a-repo"' in bad_source.text and 'value="mit"' in bad_source.text
        assert 'name="require_checksum" checked' in bad_source.text
        bad_name = await register(client, name="a/b", source=SMOL)
        assert bad_name.status_code == 400 and "Name (a/b): String should match pattern" in bad_name.text
        markup = await register(client, name="<b>x</b>", source=SMOL)
        assert markup.status_code == 400 and "<b>x</b>" not in markup.text  # escaped, never markup
        assert 'class="empty">No models registered yet' in markup.text


async def test_bob_sees_only_what_his_scope_allows_and_may_not_remove_admins(context: ServerContext) -> None:
    async with browser(context) as admin, browser(context) as bob:
        await sign_in(admin, user_token(context, "admin"))
        await sign_in(bob, user_token(context, "bob"))
        assert (await register(admin, name="mine", source=SMOL)).status_code == 303
        assert (await register(admin, name="shared", source=SMOL, scope="organization")).status_code == 303
        listed = (await bob.get("/ui/models")).text
        assert 'tr data-id="shared"' in listed and 'data-id="mine"' not in listed
        hidden = await bob.get("/ui/models/mine")
        assert hidden.status_code == 404 and 'role="alert"' in hidden.text
        shared = (await bob.get("/ui/models/shared")).text
        assert 'id="materialize-form"' in shared and 'id="remove-form"' not in shared
        refused = await bob.post("/ui/models/shared/remove", data={"csrf": csrf_of(shared)})
        assert refused.status_code == 403 and "registered by admin" in refused.text
        page = (await admin.get("/ui/models/shared")).text
        removed = await admin.post("/ui/models/shared/remove", data={"csrf": csrf_of(page)})
        assert removed.status_code == 303 and removed.headers["location"] == "/ui/models"
        assert 'data-id="shared"' not in (await bob.get("/ui/models")).text


async def test_materialize_without_model_jobs_shows_the_api_words(context: ServerContext) -> None:
    context.model_jobs = None  # a control plane whose control worker is not up
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        assert (await register(client, name="m", source=SMOL)).status_code == 303
        page = (await client.get("/ui/models/m")).text
        refused = await client.post("/ui/models/m/materialize", data={"csrf": csrf_of(page)})
        assert refused.status_code == 503 and "Model jobs are not running on this control plane" in refused.text
        assert 'id="materialize-form"' in refused.text  # the page as it was, ready for a retry
