"""The audit chain end to end, in process: the real endpoint proxy (its routing table and its audit batches
through the typed client to the real API app on a real SQLite store) in front of a copy on loopback. A
served request leaves ATTEMPT then SUCCESS with the caller, copy, status and latency, and no prompt text
anywhere in the store; a refused one (no token) and one whose only copy does not answer leave FAILED; the
writer's background task posts them, and the chain verifies."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from berth.api_client import ApiClient
from berth.contracts import AuditPhase, AuditRow
from berth.processes import free_port
from berth.security import Identity, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
PROMPT = "the-harbour-master-keeps-the-secret-tide-tables"


def _publish(context: ServerContext, endpoint_id: str, url: str) -> None:
    with context.store.session() as session:
        session.add(EndpointRow(id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="vllm", scope="group",
                                owner="alice", org="acme", groups=["team"], created_at=time.time(), annotations={}))
    context.store.upsert_replica(f"wf-{endpoint_id}", endpoint_id, f"{endpoint_id}.copy-0", url, ready=True)


async def _copy() -> tuple[asyncio.Server, str]:
    """A copy that answers every completion at once."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        body = b'{"choices":[{"message":{"content":"aye"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}}'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _ask(proxy: EndpointProxy, endpoint_id: str, token: str | None) -> int:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": PROMPT}]}).encode()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"),
               *([(b"authorization", f"Bearer {token}".encode())] if token else [])]
    await proxy({"type": "http", "path": f"/endpoints/{endpoint_id}/v1/chat/completions", "method": "POST",
                 "headers": headers, "query_string": b""}, receive, send)
    return int(sent[0]["status"])


async def _wait_for(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "the audit rows did not arrive in time"
        await asyncio.sleep(0.05)


async def test_proxied_requests_leave_attempt_and_outcome_rows_without_the_prompt(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    copy, url = await _copy()
    _publish(context, "ep-up", url)
    _publish(context, "ep-down", f"http://127.0.0.1:{free_port()}")  # nothing listens: the copy is gone
    api = ApiClient("http://api", context.signing.api_token(ADMIN),
                    transport=httpx.ASGITransport(app=create_app(context)))
    proxy = EndpointProxy(api, TokenVerifier.from_jwks(context.signing.jwks()),
                          upstream=UpstreamPool(connect_timeout_s=2))
    proxy.audit.every_s = 0.05
    proxy.audit.start()
    try:
        await proxy.refresh()
        token = context.signing.endpoint_token(ALICE, "ep-up", 600)
        assert await _ask(proxy, "ep-up", token) == 200
        assert await _ask(proxy, "ep-up", None) == 401
        # The copy is out of routing since its scrape failed: no replica is ready.
        assert await _ask(proxy, "ep-down", context.signing.endpoint_token(ALICE, "ep-down", 600)) == 503

        async def six_rows() -> bool:
            return len(context.store.audit.list()) == 6
        await _wait_for(six_rows)
    finally:
        await proxy.audit.aclose()
        await api.aclose()
        await proxy.upstream.aclose()
        copy.close()
    rows = context.store.audit.list()
    by_request: dict[str, list[AuditRow]] = {}
    for row in rows:
        by_request.setdefault(row.request_id, []).append(row)
    outcomes = [[(r.phase, r.status, r.user, r.endpoint_id, r.copy_id) for r in pair] for pair in by_request.values()]
    assert outcomes == [
        [(AuditPhase.ATTEMPT, 0, "alice", "ep-up", None), (AuditPhase.SUCCESS, 200, "alice", "ep-up", "ep-up.copy-0")],
        [(AuditPhase.ATTEMPT, 0, None, "ep-up", None), (AuditPhase.FAILED, 401, None, "ep-up", None)],
        [(AuditPhase.ATTEMPT, 0, "alice", "ep-down", None),
         (AuditPhase.FAILED, 503, "alice", "ep-down", None)],
    ]
    assert all(pair[1].latency_ms > 0 and pair[1].key_id is None for pair in by_request.values())
    with context.store.engine.connect() as connection:
        stored = " ".join(str(value) for table in ("audit_batches", "audit_tallies")
                          for row in connection.execute(text(f"SELECT * FROM {table}")) for value in row)
    assert PROMPT not in stored and token not in stored and "Bearer" not in stored
    assert context.store.audit.verify().ok
