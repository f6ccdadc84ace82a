"""The model registry through the real API and store in process: add, list and visibility across users,
groups and the organization; names unique per scope; removal by owner or administrator, refused while a
workflow serves the model; pre-staged paths that escape the allowed dirs (`../`, a symlink) refused;
hf:// sources checked; a job recorded then joined; a stale job's reports ignored; an hf:// model
registered on first use; and the internal routes refusing a user's token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from berth.contracts import EvictRequest, EvictResult, ModelRecord
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.model_usage import ModelUsage, hf_model_name

SMOL = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"
DIGEST = "ab" * 32


@dataclass
class RecordingStarter:
    """The model jobs, faked: what was asked to start."""

    started: list[tuple[str, str, str]] = field(default_factory=list)
    error: Exception | None = None

    async def __call__(self, _context: ServerContext, record: ModelRecord, kind: str, job_id: str,
                       _waiter: str | None = None) -> None:
        self.started.append((record.name, kind, job_id))
        if self.error is not None:
            raise self.error


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    allowed = tmp_path.resolve() / "weights"
    (allowed / "tiny").mkdir(parents=True)
    (allowed / "tiny" / "model.safetensors").write_bytes(b"x")
    (tmp_path / "outside").mkdir()
    (allowed / "escape").symlink_to(tmp_path / "outside")
    return allowed


@pytest.fixture
def context(tmp_path: Path, staged: Path) -> ServerContext:
    context = build_context(tmp_path / "state", "127.0.0.1:1")
    context.settings = context.settings.model_copy(update={"model_dirs": str(staged)})
    context.store.ensure_user("alice", org="acme", groups=["ml"])
    context.store.ensure_user("bob", org="acme", groups=["ml"])
    context.store.ensure_user("carol", org="acme", groups=["web"])
    context.store.ensure_user("dave", org="other", groups=["ops"])
    context.model_jobs = RecordingStarter()
    return context


class Apis:
    def __init__(self, context: ServerContext) -> None:
        self.app = create_app(context)
        self.context = context
        self.clients: list[httpx.AsyncClient] = []

    def as_(self, user: str) -> httpx.AsyncClient:
        token = self.context.signing.api_token(self.context.store.identity(user), 600)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://api",
                                   headers={"Authorization": f"Bearer {token}"})
        self.clients.append(client)
        return client


@pytest.fixture
async def apis(context: ServerContext) -> AsyncIterator[Apis]:
    apis = Apis(context)
    yield apis
    for client in apis.clients:
        await client.aclose()


async def test_visibility_follows_the_scope(apis: Apis) -> None:
    alice, bob, carol, dave = (apis.as_(u) for u in ("alice", "bob", "carol", "dave"))
    for name, scope in (("mine", "user"), ("team", "group"), ("everyone", "organization")):
        made = await alice.post("/v1/models", json={"name": name, "source": SMOL, "scope": scope})
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "Registered" and made.json()["repo"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    names = {user: {m["name"] for m in (await client.get("/v1/models")).json()}
             for user, client in (("alice", alice), ("bob", bob), ("carol", carol), ("dave", dave))}
    assert names == {"alice": {"mine", "team", "everyone"}, "bob": {"team", "everyone"},
                     "carol": {"everyone"}, "dave": set()}
    assert (await bob.get("/v1/models/mine")).status_code == 404
    assert (await apis.as_("admin").get("/v1/models/mine")).json()["owner"] == "alice"
    assert len((await apis.as_("admin").get("/v1/models")).json()) == 3


async def test_names_are_unique_per_scope_and_resolve_user_first(apis: Apis) -> None:
    alice, bob = apis.as_("alice"), apis.as_("bob")
    assert (await alice.post("/v1/models", json={"name": "m", "source": SMOL, "scope": "group"})).status_code == 201
    again = await bob.post("/v1/models", json={"name": "m", "source": SMOL, "scope": "group"})
    assert again.status_code == 409 and "already exists" in again.json()["detail"]
    mine = await bob.post("/v1/models", json={"name": "m", "source": f"{SMOL}@main"})
    assert mine.status_code == 201  # the same name in bob's user scope
    assert (await bob.get("/v1/models/m")).json()["revision"] == "main"  # his own first
    assert (await alice.get("/v1/models/m")).json()["scope"] == "group"


async def test_sources_are_checked(apis: Apis, staged: Path) -> None:
    alice = apis.as_("alice")

    async def add(source: str, **extra: str) -> httpx.Response:
        return await alice.post("/v1/models", json={"name": "x", "source": source, **extra})

    assert (await add("hf://not-a-repo")).status_code == 400
    assert (await add("hf://org/name@..bad")).status_code == 400
    assert (await add("relative/dir")).status_code == 400
    dotdot = await add(str(staged / ".." / "outside"))
    assert dotdot.status_code == 400 and "outside the allowed model dirs" in dotdot.json()["detail"]
    link = await add(str(staged / "escape"))
    assert link.status_code == 400 and "outside" in link.json()["detail"]
    assert (await add(SMOL, hf_token_secret="hf_plaintext")).status_code == 400
    made = await add(str(staged / "tiny" / ".." / "tiny"), hf_token_secret="secret://user/hf")
    assert made.status_code == 201 and made.json()["path"] == str(staged / "tiny")
    assert made.json()["source"] == made.json()["path"]


async def test_remove_by_owner_or_admin_and_never_while_served(apis: Apis, context: ServerContext) -> None:
    alice, bob = apis.as_("alice"), apis.as_("bob")
    made = (await alice.post("/v1/models", json={"name": "team", "source": SMOL, "scope": "group",
                                                 "signature": "cd" * 32})).json()
    assert made["signed"] is True and "signature" not in made
    refused = await bob.delete("/v1/models/team")
    assert refused.status_code == 403 and "registered by alice" in refused.json()["detail"]
    usage = ModelUsage(context.store)
    usage.use(context.store.identity("bob"), "model://team", "wf-1")
    assert (await alice.get("/v1/models/team")).json()["referenced_by"] == ["wf-1"]
    busy = await alice.delete("/v1/models/team")
    assert busy.status_code == 409 and "wf-1" in busy.json()["detail"]
    assert usage.release("wf-1") == 1
    assert (await apis.as_("admin").delete("/v1/models/team")).status_code == 200
    assert (await alice.get("/v1/models/team")).status_code == 404


async def test_a_job_is_recorded_then_joined_and_stale_reports_are_ignored(apis: Apis, context: ServerContext) -> None:
    alice, service = apis.as_("alice"), apis.as_("admin")
    model_id = (await alice.post("/v1/models", json={"name": "m", "source": SMOL})).json()["id"]
    assert (await alice.post("/v1/models/m/verify")).status_code == 400  # nothing to verify yet
    first = (await alice.post("/v1/models/m/materialize")).json()
    assert first["joined"] is False and first["state"] == "Resolving"
    second = (await alice.post("/v1/models/m/materialize")).json()
    assert second["joined"] is True and second["job_id"] == first["job_id"]
    starter = context.model_jobs
    assert isinstance(starter, RecordingStarter)
    assert [kind for _, kind, _ in starter.started] == ["materialize", "materialize"]

    async def report(job_id: str, **fields: object) -> None:
        answer = await service.put(f"/v1/internal/models/{model_id}/state", json={"job_id": job_id, **fields})
        assert answer.status_code == 204, answer.text

    progress = {"job_id": first["job_id"], "progress": {"bytes_done": 5, "bytes_total": 10, "rate_bps": 2.5}}
    assert (await service.put(f"/v1/internal/models/{model_id}/progress", json=progress)).status_code == 204
    await report(first["job_id"], state="Ready", digest=DIGEST, size_bytes=10, files=3, verified=True)
    status = (await alice.get("/v1/models/m/status")).json()
    assert status["state"] == "Ready" and status["digest"] == DIGEST and status["progress"]["bytes_done"] == 5
    verify = (await alice.post("/v1/models/m/verify")).json()
    assert verify["joined"] is False and verify["state"] == "Verifying"
    await report(first["job_id"], state="Failed", message="late")  # the old job's: ignored
    assert (await alice.get("/v1/models/m")).json()["state"] == "Verifying"
    jobs = (await alice.get("/v1/model-jobs")).json()
    assert [(j["job_id"], j["kind"]) for j in jobs] == [(verify["job_id"], "verify")]
    assert (await apis.as_("carol").get("/v1/model-jobs")).json() == []
    spec = (await service.get(f"/v1/internal/models/{model_id}")).json()
    assert spec["job_kind"] == "verify" and spec["model"]["name"] == "m"


async def test_a_job_that_cannot_start_is_recorded_failed(apis: Apis, context: ServerContext) -> None:
    alice = apis.as_("alice")
    await alice.post("/v1/models", json={"name": "m", "source": SMOL})
    context.model_jobs = RecordingStarter(error=RuntimeError("no worker"))
    with pytest.raises(RuntimeError):
        await alice.post("/v1/models/m/materialize")
    failed = (await alice.get("/v1/models/m")).json()
    assert failed["state"] == "Failed" and "no worker" in failed["message"]
    context.model_jobs = None
    assert (await alice.post("/v1/models/m/materialize")).status_code == 503


async def test_use_registers_hf_on_first_use_and_answers_the_directory_when_ready(
        apis: Apis, context: ServerContext) -> None:
    service = apis.as_("admin")
    use = {"ref": f"{SMOL}?trust_remote_code=0", "user": "alice", "workflow_id": "wf-1"}
    first = (await service.post("/v1/internal/models/use", json=use)).json()
    name = hf_model_name("HuggingFaceTB/SmolLM2-135M-Instruct", None)
    assert name == "HuggingFaceTB--SmolLM2-135M-Instruct"
    assert first["model"]["name"] == name and first["model"]["state"] == "Resolving" and first["job_id"]
    assert first["model_dir"] is None
    again = (await service.post("/v1/internal/models/use", json={**use, "workflow_id": "wf-2"})).json()
    assert again["model"]["id"] == first["model"]["id"] and again["job_id"] == first["job_id"]  # joined
    assert again["model"]["referenced_by"] == ["wf-1", "wf-2"]
    await service.put(f"/v1/internal/models/{first['model']['id']}/state",
                      json={"job_id": first["job_id"], "state": "Ready", "digest": DIGEST})
    ready = (await service.post("/v1/internal/models/use", json={**use, "ref": f"model://{name}"})).json()
    assert ready["model_dir"] == str(context.state.models / "sha256" / DIGEST)
    usage = ModelUsage(context.store)
    assert usage.referenced_digests() == {DIGEST}
    released = await service.post("/v1/internal/models/release", json={"workflow_id": "wf-1"})
    assert released.json() == {"released": 1}
    assert hf_model_name("org/name", "refs/pr/1") == "org--name--refs-pr-1"
    assert usage.mark_evicted(DIGEST) == 1
    assert (await apis.as_("alice").get(f"/v1/models/{name}")).json()["state"] == "Registered"


async def test_internal_routes_and_eviction_refuse_a_user_token(apis: Apis, context: ServerContext) -> None:
    alice = apis.as_("alice")
    model_id = (await alice.post("/v1/models", json={"name": "m", "source": SMOL})).json()["id"]
    refusals = [await alice.get(f"/v1/internal/models/{model_id}"),
                await alice.put(f"/v1/internal/models/{model_id}/state", json={"job_id": "j", "state": "Ready"}),
                await alice.put(f"/v1/internal/models/{model_id}/progress", json={"job_id": "j", "progress": {}}),
                await alice.post("/v1/internal/models/use", json={"ref": "model://m", "user": "alice",
                                                                  "workflow_id": "w"}),
                await alice.post("/v1/internal/models/release", json={"workflow_id": "w"}),
                await alice.post("/v1/models/cache/evict", json={})]
    assert [r.status_code for r in refusals] == [403] * 6
    assert (await apis.as_("admin").post("/v1/models/cache/evict", json={})).status_code == 503
    asked: list[EvictRequest] = []

    async def evict(_context: ServerContext, request: EvictRequest) -> EvictResult:
        asked.append(request)
        return EvictResult(budget_bytes=request.budget_bytes or 0, before_bytes=10, after_bytes=0)

    context.model_cache_evict = evict
    answer = await apis.as_("admin").post("/v1/models/cache/evict", json={"budget_bytes": 0})
    assert answer.status_code == 200 and answer.json()["before_bytes"] == 10 and asked[0].budget_bytes == 0


async def test_a_name_may_hold_dots_dashes_and_underscores(apis: Apis) -> None:
    alice = apis.as_("alice")
    for name in ("SmolLM2-135M.Q4_K", "cache"):
        assert (await alice.post("/v1/models", json={"name": name, "source": SMOL})).status_code == 201
        assert (await alice.get(f"/v1/models/{name}")).json()["name"] == name
    assert (await alice.post("/v1/models", json={"name": "a/b", "source": SMOL})).status_code == 422
