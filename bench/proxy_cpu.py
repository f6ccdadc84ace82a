"""The endpoint proxy's own CPU per request and per streamed chunk, in process: its ASGI app called directly
(no uvicorn, no client) in front of a keep-alive loopback copy in another process (bench/loopback_copy.py), a
public endpoint, default settings, concurrency 1. A wrk run's figures move with the machine's load more than a
change to the proxy does; process CPU time of the one process that runs the proxy's code does not (issue 32's
request pipeline was held to this: 218 -> 203 us a request, 2.96 -> 2.76 us a chunk, docs/performance.md).
Usage: python bench/proxy_cpu.py [--rounds N] [--client sdk] [--baseline DIR [--runs N]]; prints JSON (the sorted
figures of each round).

`--client sdk` sends what the OpenAI Python SDK sends (its sixteen headers) with an endpoint token in
Authorization, to a proxy that signs caller assertions, as a stack's proxy does; the default sends three headers
and no credential. `--baseline DIR` measures another checkout (e.g. `git archive main | tar -x -C DIR`) against
this one in the same run: `--runs` processes of each, alternating, this script's harness importing each
checkout's code; it prints each run's median and the median of those (issue 33, docs/performance.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
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
from berth.security import Identity, SigningKey, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy

PATH = "/endpoints/ep-1/v1/chat/completions"
PLAIN = json.dumps({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).encode()
STREAM = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
REQUESTS, STREAMS = 2000, 30
PLAIN_HEADERS = [(b"content-type", b"application/json"), (b"x-session-id", b"s1")]
# What the OpenAI Python SDK (1.x, httpx) sends with a chat completion, less its body's length and its credential.
SDK_HEADERS = [(b"host", b"127.0.0.1:8000"), (b"accept-encoding", b"gzip, deflate"), (b"connection", b"keep-alive"),
               (b"accept", b"application/json"), (b"content-type", b"application/json"),
               (b"user-agent", b"OpenAI/Python 1.59.7"), (b"x-stainless-lang", b"python"),
               (b"x-stainless-package-version", b"1.59.7"), (b"x-stainless-os", b"Linux"),
               (b"x-stainless-arch", b"x64"), (b"x-stainless-runtime", b"CPython"),
               (b"x-stainless-runtime-version", b"3.11.7"), (b"x-stainless-async", b"false"),
               (b"x-stainless-retry-count", b"0"), (b"x-stainless-read-timeout", b"600")]


class Routes:
    """The API's routes table, answered in process: one public endpoint with one ready copy, listed as the API
    lists it (in `copy_urls` too: a pool whose table lists no ready copy URL looks stale to EndpointProxy.route,
    which then refreshes the table every 0.2 s, as it does for a pool being woken)."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def routes(self) -> RoutesTable:
        return RoutesTable.model_validate({"endpoints": [{
            "id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [], "service": "vllm",
            "service_url": None, "copy_urls": [self.url], "routing_policy": "least_queue",
            "pool": [{"copy_id": "c1", "url": self.url}]}]})

    async def aclose(self) -> None:
        return None


async def send_requests(proxy: EndpointProxy, count: int, body: bytes,
                        headers: list[tuple[bytes, bytes]] = PLAIN_HEADERS) -> int:
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
             "headers": [*headers, (b"content-length", str(len(body)).encode())]}
    for _ in range(count):
        given = False
        await proxy(scope, receive, send)  # type: ignore[arg-type]
    return chunks


async def measure(copy_url: str, rounds: int, client: str = "plain") -> dict[str, Any]:
    key = SigningKey.load_or_create(Path(tempfile.mkdtemp(prefix="berth-bench-key-")))
    headers = PLAIN_HEADERS
    if client == "sdk":
        token = key.endpoint_token(Identity("alice", org="acme"), "ep-1", 3600)
        headers = [*SDK_HEADERS, (b"authorization", f"Bearer {token}".encode())]
    proxy = EndpointProxy(Routes(copy_url), TokenVerifier.from_jwks(key.jwks()),  # type: ignore[arg-type]
                          upstream=UpstreamPool(), signer=key if client == "sdk" else None,
                          refresh_s=3600.0)  # the table never changes mid-run
    await proxy.refresh()

    await send_requests(proxy, 500, PLAIN, headers)  # warm: connections, caches
    per_request, per_chunk = [], []
    for _ in range(rounds):
        began = time.process_time()
        await send_requests(proxy, REQUESTS, PLAIN, headers)
        per_request.append(round((time.process_time() - began) / REQUESTS * 1e6, 2))
        began = time.process_time()
        chunks = await send_requests(proxy, STREAMS, STREAM, headers)
        per_chunk.append(round((time.process_time() - began) / max(1, chunks) * 1e6, 3))
    return {"cpu_us_per_request": sorted(per_request), "cpu_us_per_chunk": sorted(per_chunk)}


def measure_here(rounds: int, client: str) -> dict[str, Any]:
    """One process's rounds, before a loopback copy of its own."""
    port = free_port()
    copy = subprocess.Popen([sys.executable, str(REPO / "bench" / "loopback_copy.py"), str(port)],
                            stdout=subprocess.PIPE)
    try:
        assert copy.stdout is not None and copy.stdout.readline().strip() == b"ready"
        # On uvloop, as gateway/endpoint/run.py serves the proxy.
        return uvloop.run(measure(f"http://127.0.0.1:{port}", rounds, client))
    finally:
        copy.kill()
        copy.wait()


def against_baseline(baseline: Path, runs: int, rounds: int, client: str) -> dict[str, Any]:
    """`runs` processes of each checkout, alternating (baseline first); each the median of its rounds."""
    figures: dict[str, dict[str, list[float]]] = {
        side: {"cpu_us_per_request": [], "cpu_us_per_chunk": []} for side in ("baseline", "this")}
    lowest: dict[str, list[float]] = {"baseline": [], "this": []}
    for _ in range(runs):
        for side, checkout in (("baseline", baseline), ("this", REPO)):
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            out = subprocess.run([sys.executable, __file__, "--rounds", str(rounds), "--client", client, "--child"],
                                 env=env, cwd=checkout, capture_output=True, check=True, timeout=600).stdout
            result = json.loads(out)
            for name, values in figures[side].items():
                values.append(statistics.median(result[name]))
            lowest[side].append(min(result["cpu_us_per_request"]))
    # A shared machine only ever adds to a round's CPU time (other processes' cache misses, wake-ups): each
    # run's quietest round is the least disturbed figure, and its median over the runs is reported beside the rest.
    return {"client": client, "runs": runs, "rounds_per_run": rounds, "requests_per_round": REQUESTS,
            **{side: {**{name: {"runs": values, "median": statistics.median(values)} for name, values in sides.items()},
                      "lowest_round_per_run": {"runs": lowest[side], "median": statistics.median(lowest[side])}}
               for side, sides in figures.items()},
            "request_change": _change(figures["baseline"]["cpu_us_per_request"], figures["this"]["cpu_us_per_request"]),
            "request_change_lowest": _change(lowest["baseline"], lowest["this"])}


def _change(before: list[float], after: list[float]) -> float:
    return round(statistics.median(after) / statistics.median(before) - 1, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--client", choices=("plain", "sdk"), default="plain")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured against this one")
    parser.add_argument("--runs", type=int, default=3, help="with --baseline: processes of each, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one run of --baseline's
    args = parser.parse_args()
    if args.baseline is not None:
        emit("proxy_cpu_against_baseline", against_baseline(args.baseline.resolve(), args.runs, args.rounds,
                                                            args.client))
        return
    result = {"requests_per_round": REQUESTS, "streams_per_round": STREAMS, "client": args.client,
              **measure_here(args.rounds, args.client)}
    if args.child:
        print(json.dumps(result))
        return
    emit("proxy_cpu", result)


if __name__ == "__main__":
    main()
