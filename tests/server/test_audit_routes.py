"""The audit routes through the real app and the typed client: Berth's own services (administrators)
append batches; a batch or a field over its bound is refused in one line; an administrator lists every
row and verifies the chain; anyone else lists only their own requests' rows and may neither append nor
verify."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from berth.api_client import ApiClient
from berth.contracts import MAX_AUDIT_BATCH, AuditBatch, AuditPhase, AuditRecord
from berth.errors import PermissionDeniedError
from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import AuditBatchRow

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
BATCH_NUMBERS = itertools.count(1)


def _records(request: str, user: str, endpoint: str = "ep-1") -> list[AuditRecord]:
    return [AuditRecord(at=1000.0, phase=AuditPhase.ATTEMPT, request_id=request, user=user, endpoint_id=endpoint),
            AuditRecord(at=1000.5, phase=AuditPhase.SUCCESS, request_id=request, status=200, user=user,
                        endpoint_id=endpoint, copy_id="ep-1.copy-0", latency_ms=500.0)]


def _batch(records: list[AuditRecord]) -> AuditBatch:
    return AuditBatch.of("proxy-a", next(BATCH_NUMBERS), records)


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")  # no audit route reaches Temporal
    context.store.ensure_user("alice", org="acme", groups=["team"])
    return context


def _client(context: ServerContext, who: Identity) -> ApiClient:
    return ApiClient("http://api", context.signing.api_token(who),
                     transport=httpx.ASGITransport(app=create_app(context)))


async def test_an_administrator_appends_lists_and_verifies(context: ServerContext) -> None:
    async with _client(context, ADMIN) as api:
        appended = await api.append_audit(_batch([*_records("r1", "alice"), *_records("r2", "bob", "ep-2")]))
        assert (appended.appended, appended.duplicates) == (4, 0)
        assert len(await api.audit()) == 4
        assert {r.request_id for r in await api.audit(endpoint_id="ep-2")} == {"r2"}
        assert await api.audit(since=2000.0) == []
        assert [r.seq for r in await api.audit(limit=1)] == [4]
        verdict = await api.verify_audit()
        assert verdict.ok and verdict.rows == 4 and verdict.first_broken_seq is None
        with context.store.engine.begin() as connection:  # record 2's user, changed in the database
            lines = connection.execute(select(AuditBatchRow.records)).scalar_one().split("\n")
            lines[1] = lines[1].replace('"user":"alice"', '"user":"mallory"')
            connection.execute(update(AuditBatchRow).values(records="\n".join(lines)))
        verdict = await api.verify_audit()
        assert (verdict.ok, verdict.first_broken_seq, verdict.rows) == (False, 2, 2)


async def test_a_user_lists_only_their_own_rows_and_may_not_append_or_verify(context: ServerContext) -> None:
    async with _client(context, ADMIN) as admin:
        await admin.append_audit(_batch([*_records("r1", "alice"), *_records("r2", "bob")]))
    async with _client(context, ALICE) as alice:
        assert {(r.user, r.request_id) for r in await alice.audit()} == {("alice", "r1")}
        with pytest.raises(PermissionDeniedError):
            await alice.append_audit(_batch(_records("r3", "alice")))
        with pytest.raises(PermissionDeniedError):
            await alice.verify_audit()


async def test_oversized_batches_and_bad_columns_are_refused_in_one_line(context: ServerContext) -> None:
    token = context.signing.api_token(ADMIN)
    one = _batch(_records("r1", "alice")[:1]).model_dump(mode="json")
    many = {**one, **{name: values * (MAX_AUDIT_BATCH + 1) for name, values in one.items() if isinstance(values, list)}}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        answers = {
            "too many": await api.post("/v1/internal/audit", json=many),
            "too long": await api.post("/v1/internal/audit", json={**one, "user": ["u" * 200]}),
            "uneven": await api.post("/v1/internal/audit", json={**one, "status": [200, 200]}),
            "a boolean for a number": await api.post("/v1/internal/audit", json={**one, "status": [True]}),
            "bad limit": await api.get("/v1/audit", params={"limit": 100_000})}
    for answer in answers.values():
        assert answer.status_code == 422
        detail = answer.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and "u" * 200 not in detail
    assert "body.at" in answers["too many"].json()["detail"] and "body.user" in answers["too long"].json()["detail"]
    assert "different numbers of records" in answers["uneven"].json()["detail"]
    assert "status" in answers["a boolean for a number"].json()["detail"]
    # A whole number written as JSON Schema allows (714.0) is one.
    whole = await _post_once(context, token, {**one, "status": [200.0]})
    assert whole.status_code == 200 and [r.status for r in context.store.audit.list()] == [200]


async def _post_once(context: ServerContext, token: str, body: dict[str, object]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        return await api.post("/v1/internal/audit", json=body)
