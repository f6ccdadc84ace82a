"""The audit routes through the real app and the typed client: Berth's own services (administrators)
append batches; a batch or a field over its bound is refused in one line; an administrator lists every
row and verifies the chain; anyone else lists only their own requests' rows and may neither append nor
verify."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from berth.api_client import ApiClient
from berth.contracts import MAX_AUDIT_BATCH, AuditPhase, AuditRecord
from berth.errors import PermissionDeniedError
from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import AuditChainRow

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")


def _records(request: str, user: str, endpoint: str = "ep-1") -> list[AuditRecord]:
    return [AuditRecord(at=1000.0, phase=AuditPhase.ATTEMPT, request_id=request, user=user, endpoint_id=endpoint),
            AuditRecord(at=1000.5, phase=AuditPhase.SUCCESS, request_id=request, status=200, user=user,
                        endpoint_id=endpoint, copy_id="ep-1.copy-0", latency_ms=500.0)]


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
        appended = await api.append_audit([*_records("r1", "alice"), *_records("r2", "bob", "ep-2")])
        assert (appended.appended, appended.duplicates) == (4, 0)
        assert len(await api.audit()) == 4
        assert {r.request_id for r in await api.audit(endpoint_id="ep-2")} == {"r2"}
        assert await api.audit(since=2000.0) == []
        assert [r.seq for r in await api.audit(limit=1)] == [4]
        verdict = await api.verify_audit()
        assert verdict.ok and verdict.rows == 4 and verdict.first_broken_seq is None
        with context.store.engine.begin() as connection:
            connection.execute(update(AuditChainRow).where(AuditChainRow.seq == 2).values(user="mallory"))
        verdict = await api.verify_audit()
        assert (verdict.ok, verdict.first_broken_seq, verdict.rows) == (False, 2, 2)


async def test_a_user_lists_only_their_own_rows_and_may_not_append_or_verify(context: ServerContext) -> None:
    async with _client(context, ADMIN) as admin:
        await admin.append_audit([*_records("r1", "alice"), *_records("r2", "bob")])
    async with _client(context, ALICE) as alice:
        assert {(r.user, r.request_id) for r in await alice.audit()} == {("alice", "r1")}
        with pytest.raises(PermissionDeniedError):
            await alice.append_audit(_records("r3", "alice"))
        with pytest.raises(PermissionDeniedError):
            await alice.verify_audit()


async def test_oversized_batches_and_fields_are_refused_in_one_line(context: ServerContext) -> None:
    token = context.signing.api_token(ADMIN)
    record = _records("r1", "alice")[0].model_dump(mode="json")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        too_many = await api.post("/v1/internal/audit", json={"records": [record] * (MAX_AUDIT_BATCH + 1)})
        too_long = await api.post("/v1/internal/audit", json={"records": [{**record, "user": "u" * 200}]})
        bad_limit = await api.get("/v1/audit", params={"limit": 100_000})
    for answer in (too_many, too_long, bad_limit):
        assert answer.status_code == 422
        detail = answer.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and "u" * 200 not in detail
    assert "records" in too_many.json()["detail"] and "user" in too_long.json()["detail"]
    assert context.store.audit.list() == []
