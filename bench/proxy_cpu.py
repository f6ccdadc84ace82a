"""The endpoint proxy's own CPU per request and per streamed chunk, in process: its ASGI app called directly
(no uvicorn, no client) in front of a keep-alive loopback copy in another process (bench/loopback_copy.py), a
public endpoint, default settings, concurrency 1. A wrk run's figures move with the machine's load more than a
change to the proxy does; process CPU time of the one process that runs the proxy's code does not (issue 32's
request pipeline was held to this: 218 -> 203 us a request, 2.96 -> 2.76 us a chunk, docs/performance.md).
Usage: python bench/proxy_cpu.py [--rounds N]; prints JSON (the sorted figures of each round)."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from bench.common import REPO, emit
from berth.contracts import RoutesTable
from berth.processes import free_port
from berth.security import SigningKey, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy

PATH = "/endpoints/ep-1/v1/chat/completions"
PLAIN = json.dumps({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).encode()
STREAM = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
REQUESTS, STREAMS = 2000, 30


class Routes:
    """The API's routes table, answered in process: one public endpoint with one copy."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def routes(self) -> RoutesTable:
        return RoutesTable.model_validate({"endpoints": [{
            "id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [], "service": "vllm",
            "service_url": None, "replicas": [], "routing_policy": "least_queue",
            "pool": [{"copy_id": "c1", "url": self.url}]}]})

    async def aclose(self) -> None:
        return None


async def send_requests(proxy: EndpointProxy, count: int, body: bytes) -> int:
    """`count` requests one after another; the body chunks the proxy sent back."""
    chunks = 0
    given = False
    never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:
            return await never  # a client that stays: no disconnect
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal chunks
        chunks += bool(message.get("body"))

    scope = {"type": "http", "path": PATH, "method": "POST", "query_string": b"", "client": ("127.0.0.1", 1),
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                         (b"x-session-id", b"s1")]}
    for _ in range(count):
        given = False
        await proxy(scope, receive, send)  # type: ignore[arg-type]
    return chunks


async def measure(copy_url: str, rounds: int) -> dict[str, Any]:
    key = SigningKey.load_or_create(Path(tempfile.mkdtemp(prefix="berth-bench-key-")))
    proxy = EndpointProxy(Routes(copy_url), TokenVerifier.from_jwks(key.jwks()),  # type: ignore[arg-type]
                          upstream=UpstreamPool())
    await proxy.refresh()

    async def no_refresh(unless_newer_than_s: float = 0.0) -> None:
        return None  # the table never changes mid-run

    proxy.refresh = no_refresh  # type: ignore[method-assign]
    await send_requests(proxy, 500, PLAIN)  # warm: connections, caches
    per_request, per_chunk = [], []
    for _ in range(rounds):
        began = time.process_time()
        await send_requests(proxy, REQUESTS, PLAIN)
        per_request.append(round((time.process_time() - began) / REQUESTS * 1e6, 2))
        began = time.process_time()
        chunks = await send_requests(proxy, STREAMS, STREAM)
        per_chunk.append(round((time.process_time() - began) / max(1, chunks) * 1e6, 3))
    return {"requests_per_round": REQUESTS, "streams_per_round": STREAMS,
            "cpu_us_per_request": sorted(per_request), "cpu_us_per_chunk": sorted(per_chunk)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    copy = subprocess.Popen([sys.executable, str(REPO / "bench" / "loopback_copy.py"), str(port)],
                            stdout=subprocess.PIPE)
    try:
        assert copy.stdout is not None and copy.stdout.readline().strip() == b"ready"
        # On uvloop, as gateway/endpoint/run.py serves the proxy.
        emit("proxy_cpu", uvloop.run(measure(f"http://127.0.0.1:{port}", args.rounds)))
    finally:
        copy.kill()
        copy.wait()


if __name__ == "__main__":
    main()
