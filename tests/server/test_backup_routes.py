"""`GET /v1/admin/backup` and `POST /v1/admin/restore` through the real app and the typed client: a populated control
plane (users, groups, a workflow at revision 2, its endpoint, two endpoint tokens (one revoked), an API key, a secret,
a model record) backed up and restored into a fresh state dir holding the same keys; the restored store backs up to
the same document, the workflow's pool is started again under its ID with its endpoint's ID and URL, the old API key
and endpoint token still verify and the revoked token stays revoked. The document holds no plaintext secret, key or
token. Refusals: another version, another control plane's keys, a store in use, a caller who is no administrator —
each one line, each writing nothing.

Temporal is `StartsRecorded`, a fake that records the starts (the pools' own behaviour is the workflows' tests')."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.api_client import ApiClient
from berth.api_keys import parse_key
from berth.contracts import KeyCreateRequest, KeyVerifyRequest, ModelCreate, ModelRecord
from berth.contracts.policies import PolicyRules
from berth.errors import ConflictError, PermissionDeniedError, UserInputError
from berth.security import API_AUDIENCE, WORKFLOW_INPUT_AUDIENCE, Identity, endpoint_audience
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.policies import Policies
from server.submission import new_rows, with_generated_keys
from workflows.payloads import PoolInput

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
SECRET_VALUE = "s3cret-value-never-in-a-backup"


@dataclass
class StartsRecorded:
    """A Temporal client that records each start: (workflow ID, its input, the ID conflict policy)."""

    starts: list[tuple[str, PoolInput, Any]] = field(default_factory=list)

    async def start_workflow(self, _run: Any, pool: PoolInput, *, id: str, task_queue: str,  # noqa: A002
                             id_conflict_policy: Any = None) -> None:
        self.starts.append((id, pool, id_conflict_policy))


@dataclass
class Populated:
    context: ServerContext
    workflow_id: str
    endpoint_id: str
    api_key: str
    endpoint_token: str
    revoked_token_id: str  # an endpoint token revoked before the backup: it stays revoked
    revoked_api_token: str  # bob's API token, revoked before the backup: it stays revoked
    generated_key: str  # the LiteLLM master key Berth generated into the definition


async def _no_job(*_args: Any) -> None:
    return None


def _context(state_dir: Path) -> ServerContext:
    context = build_context(state_dir, "127.0.0.1:1")  # Temporal: the fake below, never dialled
    context._temporal = StartsRecorded()  # type: ignore[assignment]
    context.model_jobs = _no_job
    return context


def _client(context: ServerContext, who: Identity) -> ApiClient:
    return ApiClient("http://api", context.signing.api_token(who),
                     transport=httpx.ASGITransport(app=create_app(context)))


def _add_workflow(context: ServerContext) -> tuple[str, str, str]:
    """alice's GPT-OSS 20B pool as a start writes it (revision 1), then a second revision: (ID, endpoint, its key)."""
    entry = find_entry("GPT-OSS 20B")
    definition = with_generated_keys(render(entry, resolve_values(entry, {})))
    row, endpoint = new_rows(entry, definition, ALICE, "chat")
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    context.store.revisions.add_revision(row.id, 1, definition.model_dump(mode="json"), {}, ALICE.user)
    second = render(entry, resolve_values(entry, {"MaxReplicas": 3})).model_copy(update={"api_key": definition.api_key})
    context.store.revisions.add_revision(row.id, 2, second.model_dump(mode="json"), {"MaxReplicas": 3}, ALICE.user)
    assert definition.api_key
    return row.id, endpoint.id, definition.api_key


@pytest.fixture
async def populated(tmp_path: Path) -> Populated:
    context = _context(tmp_path / "old")
    context.store.create_user("alice", "acme", ["team"])
    context.store.create_user("bob", "acme", ["team", "ops"])
    workflow_id, endpoint_id, generated = _add_workflow(context)
    async with _client(context, ALICE) as api:
        key = await api.create_key(KeyCreateRequest(name="ci", endpoint_id=endpoint_id, request_quota=100))
        token = await api.generate_token(endpoint_id, "7d", note="notebook")
        revoked = await api.generate_token(endpoint_id, "7d", note="leaked")
        assert revoked.id is not None
        await api.revoke_endpoint_token(endpoint_id, revoked.id)
        await api.create_secret("secret://user/hf", "value", SECRET_VALUE)
        await api.add_model(ModelCreate(name="qwen", source="hf://Qwen/Qwen3-8B"))
    Policies(context.store).put("group", "team", PolicyRules(max_gpus=8, model_sources=["hf://openai/"]), "admin")
    bobs = context.signing.api_token(Identity(user="bob", groups=("ops", "team"), org="acme"))
    claims = context.verifier.verify(bobs, API_AUDIENCE)
    context.tokens.record(claims, "user", "laptop", "admin")
    context.tokens.revoke(ADMIN, claims["jti"])
    return Populated(context, workflow_id, endpoint_id, key.key, token.token, revoked.id, bobs, generated)


def _fresh_with_keys_of(old: ServerContext, state_dir: Path) -> ServerContext:
    """A fresh control plane given the old one's keys, as docs/backup.md says to restore."""
    shutil.copytree(old.state.keys, state_dir / old.state.keys.name)
    return _context(state_dir)


async def test_a_backup_restores_into_a_fresh_control_plane(populated: Populated, tmp_path: Path) -> None:
    async with _client(populated.context, ADMIN) as api:
        document = await api.backup()
    assert (document.format, document.version) == ("berth-backup", 1)
    counts = {name: len(rows) for name, rows in document.tables}
    # API tokens: alice's and the administrator's (each recorded when first seen) and bob's, revoked.
    assert counts == {"users": 3, "groups": 3, "memberships": 4, "workflows": 1, "workflow_revisions": 2,
                      "endpoints": 1, "secrets": 1, "api_tokens": 3, "token_cutoffs": 0, "endpoint_tokens": 2,
                      "api_keys": 1, "models": 1, "model_uses": 0, "policies": 1}
    fresh = _fresh_with_keys_of(populated.context, tmp_path / "new")
    async with _client(fresh, ADMIN) as api:
        restored = await api.restore(document)
        again = await api.backup()
    assert restored.rows == counts
    # The same document, the endpoint's service address aside (none was set here) and the record of the token the
    # restore was made with, which the new control plane saw first.
    assert again.tables.model_copy(update={"api_tokens": []}) == document.tables.model_copy(update={"api_tokens": []})
    assert set(document.tables.api_tokens) < set(again.tables.api_tokens)
    [workflow] = restored.workflows
    url = f"{fresh.settings.proxy_url.rstrip('/')}/endpoints/{populated.endpoint_id}"
    assert (workflow.id, workflow.endpoint_id, workflow.url, workflow.started) == (
        populated.workflow_id, populated.endpoint_id, url, True)
    [(started_id, pool, conflict)] = fresh._temporal.starts  # type: ignore[union-attr]
    assert (started_id, pool.endpoint_id, pool.endpoint_url, pool.owner.user) == (
        populated.workflow_id, populated.endpoint_id, url, "alice")
    assert pool.definition.pool.max_replicas == 3 and pool.revision == 2  # its latest revision, under its number
    assert conflict.name == "USE_EXISTING"  # a pool Temporal still runs is adopted
    grant = fresh.verifier.verify(pool.grant, WORKFLOW_INPUT_AUDIENCE)
    assert grant["digest"] == pool.digest()
    await _old_credentials_work(populated, fresh)


async def _old_credentials_work(populated: Populated, fresh: ServerContext) -> None:
    async with _client(fresh, ADMIN) as api:
        verdict = await api.verify_key(KeyVerifyRequest(key=populated.api_key, endpoint_id=populated.endpoint_id))
    assert (verdict.owner, verdict.endpoint_id) == ("alice", populated.endpoint_id)
    claims = fresh.verifier.verify(populated.endpoint_token, endpoint_audience(populated.endpoint_id))
    assert claims["sub"] == "alice"
    revoked = fresh.tokens.refusal(fresh.verifier.verify(populated.revoked_api_token, API_AUDIENCE))
    assert revoked is not None and revoked.startswith("Token revoked")
    assert fresh.store.endpoint_tokens.revoked_ids() == {populated.endpoint_id: [populated.revoked_token_id]}


def _secret_of(api_key: str) -> str:
    # The key's secret part, parsed as the server does: token_urlsafe may itself hold "_", so splitting on the
    # last "_" could yield a two-letter tail that matches anywhere in the document (a CI flake, stop 43).
    parts = parse_key(api_key)
    assert parts is not None
    return parts.secret


async def test_the_document_holds_no_plaintext_secret_key_or_token(populated: Populated) -> None:
    async with _client(populated.context, ADMIN) as api:
        text = json.dumps((await api.backup()).model_dump(mode="json"))
    for plaintext in (SECRET_VALUE, populated.api_key, populated.endpoint_token, populated.revoked_api_token,
                      populated.generated_key, _secret_of(populated.api_key)):
        assert plaintext not in text
    assert "BEGIN PRIVATE KEY" not in text


async def _refusal(context: ServerContext, who: Identity, document: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {context.signing.api_token(who)}"}) as raw:
        return await raw.post("/v1/admin/restore", json=document)


async def test_refusals_are_one_line(populated: Populated, tmp_path: Path) -> None:
    async with _client(populated.context, ADMIN) as api:
        document = await api.backup()
    fresh = _fresh_with_keys_of(populated.context, tmp_path / "new")
    newer = {**document.model_dump(mode="json"), "version": 2, "tables": {"shape": "unknown"}}
    answer = await _refusal(fresh, ADMIN, newer)
    assert answer.status_code == 422 and "backup version 2 unknown; this Berth reads 1" in answer.json()["detail"]
    for refused in (answer, await _refusal(fresh, ALICE, document.model_dump(mode="json"))):
        assert set(refused.json()) == {"detail", "code"} and "\n" not in refused.text
    async with _client(fresh, ALICE) as api:
        with pytest.raises(PermissionDeniedError, match="Only administrators"):
            await api.restore(document)
        with pytest.raises(PermissionDeniedError, match="Only administrators"):
            await api.backup()
    async with _client(populated.context, ADMIN) as api:
        with pytest.raises(ConflictError, match="already holds workflows .* restore only into an empty one"):
            await api.restore(document)
    elsewhere = _context(tmp_path / "other-keys")
    async with _client(elsewhere, ADMIN) as api:
        with pytest.raises(UserInputError, match="made under other keys .the token signing key differs"):
            await api.restore(document)
    assert elsewhere.store.workflows() == [] and fresh.store.workflows() == []  # nothing written by a refusal


async def test_a_restore_over_a_store_in_use_writes_nothing(populated: Populated, tmp_path: Path) -> None:
    """The check and the writes share one transaction: a store that holds only a model is refused whole."""
    async with _client(populated.context, ADMIN) as api:
        document = await api.backup()
    fresh = _fresh_with_keys_of(populated.context, tmp_path / "new")
    async with _client(fresh, ALICE) as api:
        kept: ModelRecord = await api.add_model(ModelCreate(name="mine", source="hf://org/mine"))
    async with _client(fresh, ADMIN) as api:
        with pytest.raises(ConflictError, match="already holds models .e.g. 'mine'"):
            await api.restore(document)
    assert [user.user for user in fresh.store.users()] == ["admin"] and kept.name == "mine"
    assert fresh._temporal.starts == []  # type: ignore[union-attr]
