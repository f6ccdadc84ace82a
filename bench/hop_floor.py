"""What one more process on the path costs a request at concurrency 1, on this machine (issue 33's added p50).

Before one keep-alive loopback copy (bench/loopback_copy.py), in processes of their own on uvloop:
- `forwarder`: the least any proxy process can do — a byte pipe (an asyncio Protocol a side, one upstream
  connection per client connection, no parsing): the floor of one more hop, the kernel's and the scheduler's;
- `uvicorn_bare`: uvicorn (as the proxy runs it, ConnectionLimits guards on) answering a minimal app itself;
- `proxy`: the endpoint proxy under uvicorn as gateway/endpoint/run.py starts it (bench/front_cpu.py's harness:
  a public endpoint answered in process, default settings).
A blocking-socket client (a few µs a request of its own, so the figures are the servers') sends the same
non-streamed request to the copy and to each, in turn, one at a time; the p50 of each and what each adds to the
copy's; each server process's CPU per request over that run (/proc), and over a wrk run at concurrency 32 (where
it never sleeps between requests). Usage: PYTHONPATH=. .venv/bin/python -m bench.hop_floor [--rounds N]; prints JSON.
`--baseline DIR [--app proxy|bare]`: that server from another checkout (`git archive REV | tar -x -C DIR`) beside
this one's, CPU per request at concurrency 32 in five alternating rounds and the added p50 of each.
`--placement`: the proxy's added p50 and CPU per request at concurrency 1 with the client, the copy and the proxy
on one vCPU, with the proxy alone on the other, and left to the scheduler (what a wake across vCPUs costs here)."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, cpu_seconds, emit, wrk_post_script
from bench.proxy_cpu import PATH, PLAIN
from berth.processes import free_port

WARM = 200  # requests to each before the measured ones: connections, caches, the proxy's first routes


class _Pipe(asyncio.Protocol):
    """One side of the forwarder: what arrives goes out the other side's transport, as it is (kept until that
    side is connected: uvloop may deliver a request before the upstream connection is made)."""

    def __init__(self, peer: asyncio.Transport | None = None) -> None:
        self.peer = peer
        self.early: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.early.append(data)
        else:
            self.peer.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()


def forward(port: int, copy_port: int) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()

        class Front(_Pipe):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                loop.create_task(self._open(transport))  # type: ignore[arg-type]

            async def _open(self, transport: asyncio.Transport) -> None:
                back, _ = await loop.create_connection(lambda: _Pipe(transport), "127.0.0.1", copy_port)
                self.peer = back
                for data in self.early:
                    back.write(data)

        server = await loop.create_server(Front, "127.0.0.1", port)
        print("ready", flush=True)
        await server.serve_forever()

    uvloop.run(main())


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least an ASGI app can do (read the body, answer it whole), so the figure is uvicorn's."""
    await receive()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(PLAIN))]})
    await send({"type": "http.response.body", "body": PLAIN})


def serve(port: int, copy_url: str, bare: bool) -> None:
    """EndpointProxy (or `bare_app`) under uvicorn, as gateway/endpoint/run.py starts it."""
    import tempfile
    from pathlib import Path

    import uvicorn
    import uvloop

    import berth
    from bench.proxy_cpu import Routes
    from berth.security import SigningKey, TokenVerifier
    from berth.settings.connections import ConnectionLimits
    from gateway.endpoint.endpoint_proxy import EndpointProxy

    key = SigningKey.load_or_create(Path(tempfile.mkdtemp(prefix="berth-bench-key-")))
    proxy = EndpointProxy(Routes(copy_url), TokenVerifier.from_jwks(key.jwks()),  # type: ignore[arg-type]
                          refresh_s=3600.0)  # the table never changes mid-run
    try:  # the protocol every Berth server runs; a --baseline from before berth/http_connection.py has it here
        from berth.http_connection import guarded_protocol
    except ImportError:
        from berth.http_guard import guarded_protocol  # type: ignore[attr-defined,no-redef]
    server_class = uvicorn.Server
    # As berth/settled_server.py `serve` runs every Berth server, in a checkout that has it (a --baseline from before it
    # would find this checkout's module through the editable install, so its file is looked for first).
    if (Path(berth.__file__).parent / "settled_server.py").exists():
        from berth.settled_server import SettlingServer
        server_class = SettlingServer

    async def main() -> None:
        await proxy.refresh()

        async def scrape_forever() -> None:
            # The copy's load figures stay fresh (berth/routing_rules.py FRESH_FOR_S) as the scraper keeps them:
            # a run past 30 s would answer 503 "no replica ready" without this.
            while True:
                await asyncio.sleep(5)
                await asyncio.gather(*(proxy.scraper.scrape_now(replica) for replica in proxy._replicas.values()))

        scraping = asyncio.create_task(scrape_forever())  # noqa: F841 — runs as long as the process
        config = uvicorn.Config(bare_app if bare else proxy, host="127.0.0.1", port=port, log_level="warning",
                                access_log=False, loop="none", http=guarded_protocol(ConnectionLimits()),
                                lifespan="off")
        server = server_class(config)
        task = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 — uvicorn offers a flag, not an event
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        await task

    uvloop.run(main())


def _request(port: int) -> bytes:
    return (b"POST %b HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
            % (PATH.encode(), port, len(PLAIN), PLAIN))


def _exchange(sock: socket.socket, request: bytes) -> float:
    """One request, its whole answer read (by its content-length); the seconds it took."""
    started = time.perf_counter()
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    assert b"content-length:" in head.lower(), head
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return time.perf_counter() - started


def p50s(ports: dict[str, int], rounds: int) -> dict[str, float]:
    socks = {name: socket.create_connection(("127.0.0.1", port)) for name, port in ports.items()}
    for sock in socks.values():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    requests = {name: _request(port) for name, port in ports.items()}
    took: dict[str, list[float]] = {name: [] for name in ports}
    try:
        for number in range(rounds + WARM):
            for name, sock in socks.items():
                seconds = _exchange(sock, requests[name])
                if number >= WARM:  # warm: connections, caches, the proxy's first routes
                    took[name].append(seconds * 1000)
    finally:
        for sock in socks.values():
            sock.close()
    return {name: statistics.median(values) for name, values in took.items()}


def wrk_cpu(ports: dict[str, int], pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each server's CPU per request under wrk (one thread, concurrency 32) for `seconds`: what a request costs
    when the process never sleeps between them, beside the figure at concurrency 1."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return {}
    script = wrk_post_script(Path(tempfile.mkdtemp(prefix="berth-bench-wrk-")), {})
    out = {}
    for name, pid in pids.items():
        began = cpu_seconds(pid)
        result = subprocess.run([wrk, "-t1", "-c32", f"-d{seconds:.0f}s", "-s", str(script),
                                 f"http://127.0.0.1:{ports[name]}{PATH}"], capture_output=True, text=True, check=True)
        match = re.search(r"(\d+) requests in", result.stdout)
        assert match is not None and "Non-2xx" not in result.stdout, result.stdout
        out[name] = round((cpu_seconds(pid) - began) / int(match.group(1)) * 1e3, 4)
    return out


def against_baseline(baseline: Path, app: str, rounds: int, seconds: float) -> dict[str, Any]:
    """The same server (`app`: the proxy or the minimal app under uvicorn) from this checkout and from `baseline`,
    side by side before one copy: each one's CPU per request under wrk at concurrency 32, in alternating rounds
    (the order flips each round), then the added p50 of each at concurrency 1, interleaved."""
    wrk = shutil.which("wrk")
    assert wrk is not None, "wrk is needed"
    ports = {name: free_port() for name in ("copy", "baseline", "this")}
    procs = {"copy": _start([str(REPO / "bench" / "loopback_copy.py"), str(ports["copy"])])}
    copy_url = f"http://127.0.0.1:{ports['copy']}"
    script = wrk_post_script(Path(tempfile.mkdtemp(prefix="berth-bench-wrk-")), {})
    cpu: dict[str, list[float]] = {"baseline": [], "this": []}
    try:
        for name, root in (("baseline", baseline.resolve()), ("this", REPO)):
            # This file serves either way; the product code it imports is `root`'s.
            procs[name] = _start([__file__, "--serve", str(ports[name]), copy_url, app], root)
        p50s({"baseline": ports["baseline"], "this": ports["this"]}, 50)
        for number in range(rounds):
            for name in ("baseline", "this") if number % 2 == 0 else ("this", "baseline"):
                began = cpu_seconds(procs[name].pid)
                result = subprocess.run([wrk, "-t1", "-c32", f"-d{seconds:.0f}s", "-s", str(script),
                                         f"http://127.0.0.1:{ports[name]}{PATH}"], capture_output=True, text=True,
                                        check=True)
                match = re.search(r"(\d+) requests in", result.stdout)
                assert match is not None and "Non-2xx" not in result.stdout, result.stdout
                cpu[name].append(round((cpu_seconds(procs[name].pid) - began) / int(match.group(1)) * 1e6, 1))
        medians = p50s(ports, 3000)
        return {"app": app, "rounds": rounds, "cpu_us_per_request_c32": {name: sorted(v) for name, v in cpu.items()},
                "median_cpu_us_c32": {name: statistics.median(v) for name, v in cpu.items()},
                "added_p50_ms_c1": {name: round(medians[name] - medians["copy"], 4) for name in cpu}}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


PLACEMENTS = {"one_vcpu": (0, 0, 0), "proxy_on_its_own_vcpu": (0, 0, 1), "scheduler": None}


def placement(rounds: int) -> dict[str, Any]:
    """The proxy's added p50 and CPU per request at concurrency 1 (client, copy, proxy pinned as PLACEMENTS
    says, each thread of each; a fresh copy and proxy each): on this VM a wake across vCPUs is a halted vCPU's
    exit and entry, and a proxy alone on a vCPU meets cold caches at every request."""
    out: dict[str, Any] = {}
    everywhere = os.sched_getaffinity(0)
    for name, cpus in PLACEMENTS.items():
        ports = {"copy": free_port(), "proxy": free_port()}
        procs = {"copy": _start([str(REPO / "bench" / "loopback_copy.py"), str(ports["copy"])])}
        try:
            procs["proxy"] = _start([__file__, "--serve", str(ports["proxy"]), f"http://127.0.0.1:{ports['copy']}",
                                     "proxy"])
            for pid, cpu in zip((os.getpid(), procs["copy"].pid, procs["proxy"].pid), cpus or (), strict=False):
                for thread in os.listdir(f"/proc/{pid}/task"):
                    os.sched_setaffinity(int(thread), {cpu})
            began = cpu_seconds(procs["proxy"].pid)
            medians = p50s(ports, rounds)
            out[name] = {"added_p50_ms": round(medians["proxy"] - medians["copy"], 4),
                         "copy_p50_ms": round(medians["copy"], 4),
                         "proxy_cpu_ms_per_request": round((cpu_seconds(procs["proxy"].pid) - began)
                                                           / (rounds + WARM) * 1e3, 4)}
        finally:
            os.sched_setaffinity(0, everywhere)
            for proc in procs.values():
                proc.kill()
                proc.wait()
    return out


def _start(args: list[str], root: Path = REPO) -> subprocess.Popen[bytes]:
    """A process of `root`'s checkout (its own code on the path, whatever this one's)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, *args], cwd=root, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=6, help="each wrk run's length")
    parser.add_argument("--forward", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", type=Path, help="another checkout: its server against this one's, same run")
    parser.add_argument("--app", choices=("proxy", "bare"), default="proxy", help="with --baseline: which server")
    parser.add_argument("--placement", action="store_true", help="the proxy at concurrency 1, pinned three ways")
    args = parser.parse_args()
    if args.placement:
        emit("hop_floor_placement", placement(args.rounds))
        return
    if args.baseline:
        emit("hop_floor_against_baseline", against_baseline(args.baseline, args.app, 5, args.seconds))
        return
    if args.forward:
        forward(*args.forward)
        return
    if args.serve:
        serve(int(args.serve[0]), args.serve[1], args.serve[2] == "bare")
        return
    ports = {name: free_port() for name in ("copy", "forwarder", "uvicorn_bare", "proxy")}
    procs = [_start([str(REPO / "bench" / "loopback_copy.py"), str(ports["copy"])])]
    copy_url = f"http://127.0.0.1:{ports['copy']}"
    try:
        procs.append(_start(["-m", "bench.hop_floor", "--forward", str(ports["forwarder"]), str(ports["copy"])]))
        procs.append(_start(["-m", "bench.hop_floor", "--serve", str(ports["uvicorn_bare"]), copy_url, "bare"]))
        procs.append(_start(["-m", "bench.hop_floor", "--serve", str(ports["proxy"]), copy_url, "proxy"]))
        pids = dict(zip(("forwarder", "uvicorn_bare", "proxy"), (proc.pid for proc in procs[1:]), strict=True))
        began = {name: cpu_seconds(pid) for name, pid in pids.items()}
        medians = p50s(ports, args.rounds)
        cpu = {name: round((cpu_seconds(pid) - began[name]) / (args.rounds + WARM) * 1e3, 4)
               for name, pid in pids.items()}
        result: dict[str, Any] = {"rounds": args.rounds, "cpu_ms_per_request": cpu,
                                  "cpu_ms_per_request_c32": wrk_cpu(ports, pids, args.seconds),
                                  "p50_ms": {name: round(value, 4) for name, value in medians.items()},
                                  "added_p50_ms": {name: round(value - medians["copy"], 4)
                                                   for name, value in medians.items() if name != "copy"}}
        emit("hop_floor", result)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
