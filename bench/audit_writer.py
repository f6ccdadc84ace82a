"""The audit chain's cost (issue 15): what the endpoint proxy spends per request on its audit records (on the
request's path: creating the request's record, the ATTEMPT, the watched `send`, the outcome), what its
background task spends turning them into records to post, and what the store spends per record appending
batches of 200 to the chain and verifying it: SQLite in a temp dir, or `--database-url` (an empty
PostgreSQL database, say). And what the API spends per record posted to `POST /v1/internal/audit` in batches
of 500 as the proxy posts them, through the real app in process (an administrator's token, SQLite): CPU of
the whole process, its thread pool included (issue 33). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import emit
from berth.contracts import AuditBatch
from berth.security import Cipher
from gateway.endpoint.audit_writer import AuditWriter, as_batch
from server.store.database import Store

REQUESTS = 50_000
ROWS = 20_000
BATCH = 200
ROUTE_ROWS = 20_000
ROUTE_BATCH = 500  # gateway/endpoint/audit_writer.py's batch size


async def _discard(_batch: object) -> None:
    pass


async def _noop_send(_message: dict[str, Any]) -> None:
    pass


async def bench_enqueue() -> dict[str, float]:
    """Per request on the proxy's hot path: two records (ATTEMPT, outcome) and one watched response start."""
    writer = AuditWriter(_discard, capacity=REQUESTS * 2 + 1, batch_size=BATCH)
    start_message = {"type": "http.response.start", "status": 200, "headers": []}
    body_message = {"type": "http.response.body", "body": b"x"}
    started = time.perf_counter()
    for _ in range(REQUESTS):
        audited = writer.request("ep-bench")
        audited.admit("alice")
        send = audited.watch(_noop_send)
        await send(start_message)
        await send(body_message)
        audited.copy_id = "ep-bench.copy-0"
        audited.end()
    per_request_us = (time.perf_counter() - started) / REQUESTS * 1e6
    pending = writer.pending()
    started = time.perf_counter()
    for number, offset in enumerate(range(0, len(pending), BATCH), start=1):
        as_batch("bench", number, pending[offset:offset + BATCH]).model_dump_json()
    per_record_convert_us = (time.perf_counter() - started) / len(pending) * 1e6
    return {"per_request_us": round(per_request_us, 2), "per_record_enqueued_us": round(per_request_us / 2, 2),
            "per_record_background_batch_us": round(per_record_convert_us, 2)}


def bench_store(url: str | None) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="berth-bench-audit-"))
    store = Store(url or f"sqlite:///{directory / 'berth.db'}", Cipher.load_or_create(directory / "keys"))

    async def made() -> list[AuditBatch]:
        writer = AuditWriter(_discard, capacity=ROWS + 1)
        for _ in range(ROWS // 2):
            audited = writer.request("ep-bench")
            audited.admit("alice")
            audited.status = 200
            audited.end()
        pending = writer.pending()
        return [as_batch("bench", number, pending[offset:offset + BATCH])
                for number, offset in enumerate(range(0, len(pending), BATCH), start=1)]

    batches = asyncio.run(made())
    started = time.perf_counter()
    for batch in batches:
        store.audit.append_batch(batch)
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    verdict = store.audit.verify()
    verify_s = time.perf_counter() - started
    assert verdict.ok and verdict.rows == ROWS
    return {"append_per_row_us": round(append_s / ROWS * 1e6, 1),
            "append_per_batch_ms": round(append_s / (ROWS / BATCH) * 1000, 2),
            "verify_per_row_us": round(verify_s / ROWS * 1e6, 1), "rows": ROWS}


def bench_route() -> dict[str, float]:
    import httpx

    from berth.security import Identity
    from server.app import build_context, create_app

    context = build_context(Path(tempfile.mkdtemp(prefix="berth-bench-audit-route-")), "127.0.0.1:1")
    token = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    async def made() -> list[bytes]:
        writer = AuditWriter(_discard, capacity=ROUTE_ROWS + 1)
        for _ in range(ROUTE_ROWS // 2):
            audited = writer.request("ep-bench")
            audited.admit("alice")
            audited.copy_id, audited.status = "ep-bench.copy-0", 200
            audited.end()
        pending = writer.pending()
        return [as_batch("bench", number, pending[offset:offset + ROUTE_BATCH]).model_dump_json().encode()
                for number, offset in enumerate(range(0, len(pending), ROUTE_BATCH), start=1)]

    async def post_all(bodies: list[bytes]) -> float:
        transport = httpx.ASGITransport(app=create_app(context))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            (await client.post("/v1/internal/audit", content=bodies[0], headers=headers)).raise_for_status()
            started = time.process_time()
            for body in bodies[1:]:
                (await client.post("/v1/internal/audit", content=body, headers=headers)).raise_for_status()
            return time.process_time() - started

    async def run() -> dict[str, float]:
        bodies = await made()
        cpu_s = await post_all(bodies)
        return {"cpu_per_record_us": round(cpu_s / ((len(bodies) - 1) * ROUTE_BATCH) * 1e6, 1),
                "batch_size": ROUTE_BATCH}

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", help="an empty database (default: SQLite in a temp dir)")
    url = parser.parse_args().database_url
    emit("audit_writer", {"proxy": asyncio.run(bench_enqueue()), "batch_size": BATCH,
                          "store": {"database": url.split(":", 1)[0] if url else "sqlite", **bench_store(url)},
                          "api_route": bench_route()})


if __name__ == "__main__":
    main()
