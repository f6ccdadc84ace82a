"""`GET /v1/endpoints/{endpoint_id}/history` through the real app and the typed client: per-minute requests,
failures, tokens and p50/p99 from audit batches of known records, ready copies from the autoscaler's samples, quiet
minutes as zeros; outside the endpoint's scope it is not there (404); the window's bounds are the schema's."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from berth.api_client import ApiClient
from berth.contracts import AuditBatch, AuditPhase, AuditRecord, ReserveRequest
from berth.errors import NotFoundError
from berth.security import Identity
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from node.inventory import simulated_gpus
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import ReadyCopySampleRow
from server.submission import new_rows

pytestmark = pytest.mark.timeout(60)
ALICE = Identity(user="alice", groups=("team",), org="acme")
BOB = Identity(user="bob", groups=("other",), org="elsewhere")
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
WF = "wf-oss"
LATENCIES_MS = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 1000.0)


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """Alice's GPT-OSS 20B with two published copies, one ready."""
    context = build_context(tmp_path, "127.0.0.1:1")  # the history never reaches Temporal
    for who in (ALICE, BOB):
        context.store.ensure_user(who.user, org=who.org, groups=list(who.groups))
    context.store.heartbeat_node("node-1", {"address": "127.0.0.1", "engine": "simulator",
                                            "gpus": simulated_gpus("2x80GB", "node-1")}, 30000)
    entry = load_catalog()["GPT-OSS 20B"]
    definition = render(entry, resolve_values(entry, {}))
    row, endpoint = new_rows(entry, definition, ALICE, WF)
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    for index, ready in enumerate((True, False)):
        copy_id = f"{WF}.copy-{index}"
        assert context.store.placements.reserve(ReserveRequest(
            workflow_id=WF, copy_id=copy_id, nodes=1, gpus_per_node=1, gpu_memory_gb=19.0)).placement is not None
        assert context.store.placements.publish(WF, endpoint.id, copy_id, f"http://127.0.0.1:{9000 + index}", ready)
    return context


def _client(context: ServerContext, who: Identity) -> ApiClient:
    transport = httpx.ASGITransport(app=create_app(context))
    return ApiClient("http://api", context.signing.api_token(who), transport=transport)


def _endpoint_id(context: ServerContext) -> str:
    return context.store.workflow(WF).endpoint_id


def _requests(endpoint_id: str, at: float, user: str) -> list[AuditRecord]:
    """Ten requests in one minute: eight answered with LATENCIES_MS, two failed."""
    records = []
    for index in range(10):
        request_id, tail = f"{user}-{int(at)}-{index}", index < len(LATENCIES_MS)
        records.append(AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id=request_id, user=user,
                                   endpoint_id=endpoint_id))
        records.append(AuditRecord(at=at + 1, phase=AuditPhase.SUCCESS if tail else AuditPhase.FAILED,
                                   request_id=request_id, status=200 if tail else 503, tokens_in=5, tokens_out=7,
                                   user=user, endpoint_id=endpoint_id,
                                   latency_ms=LATENCIES_MS[index] if tail else 30_000.0))
    return records


async def test_each_minute_counts_what_the_proxies_recorded(context: ServerContext) -> None:
    endpoint_id = _endpoint_id(context)
    minute = int(time.time() // 60) - 3  # a whole minute inside the window, whichever minute the test ends in
    start = minute * 60.0
    # Two batches, two users: the minute's figures add up tally rows of both.
    context.store.audit.append_batch(AuditBatch.of("proxy-a", 1, _requests(endpoint_id, start + 5, "alice")))
    context.store.audit.append_batch(AuditBatch.of("proxy-b", 1, _requests(endpoint_id, start + 20, "carol")))
    context.store.audit.append_batch(AuditBatch.of("proxy-b", 2, _requests("other-endpoint", start + 5, "alice")))
    context.store.history.sample_ready([endpoint_id], now=start + 30)
    async with _client(context, ALICE) as api:
        history = await api.endpoint_history(endpoint_id, 600)
    assert (history.endpoint_id, history.window_s, history.step_s, len(history.points)) == (endpoint_id, 600, 60, 10)
    assert [p.at for p in history.points] == sorted(p.at for p in history.points)
    point = {p.at: p for p in history.points}[start]
    assert (point.requests, point.successes, point.failures, point.tokens_in, point.tokens_out) == (20, 16, 4, 100, 140)
    assert point.requests_per_s == pytest.approx(20 / 60, abs=1e-4)
    assert point.p50_ms == pytest.approx(40.0, rel=0.09) and point.p99_ms == pytest.approx(1000.0, rel=0.09)
    assert point.ready_copies == 1  # copy-1 is published but not ready
    quiet = [p for p in history.points if p.at != start]
    assert all((p.requests, p.failures, p.p50_ms, p.p99_ms, p.ready_copies) == (0, 0, None, None, None) for p in quiet)


async def test_the_autoscalers_tick_samples_ready_copies_once_a_minute(context: ServerContext) -> None:
    token = context.signing.api_token(ADMIN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as raw:
        for _ in range(2):
            answer = await raw.post("/v1/internal/autoscaler", json={"holder": "worker-1", "ttl_s": 5.0})
            assert answer.status_code == 200 and answer.json()["leader"] is True
    with context.store.session() as s:
        samples = s.execute(select(ReadyCopySampleRow.endpoint_id, ReadyCopySampleRow.ready)).all()
    assert samples == [(_endpoint_id(context), 1)]


async def test_outside_the_scope_it_is_not_there(context: ServerContext) -> None:
    async with _client(context, BOB) as api:
        with pytest.raises(NotFoundError, match="No endpoint with ID"):
            await api.endpoint_history(_endpoint_id(context))
    async with _client(context, ADMIN) as api:
        assert len((await api.endpoint_history(_endpoint_id(context))).points) == 60


@pytest.mark.parametrize("window", ["240", "21660", "330", "-60", "an-hour"])
async def test_a_window_outside_its_bounds_is_refused_in_one_line(context: ServerContext, window: str) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api") as raw:
        answer = await raw.get(f"/v1/endpoints/{_endpoint_id(context)}/history", params={"window": window},
                               headers={"Authorization": f"Bearer {context.signing.api_token(ALICE)}"})
    assert answer.status_code == 422 and "window" in answer.text and "\n" not in answer.text
