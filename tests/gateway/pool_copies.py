"""Loopback stand-ins for a pool's copies and the routes naming them, and the endpoint proxy served by
uvicorn in front of them: what the limit, affinity and retry tests share."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from berth.contracts import RoutesTable
from berth.processes import free_port

EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "tok"}}]}\n\n'
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class Copy:
    """One copy: answers its /metrics scrape, and a POST by its `?copy=` query (else the last part of its
    path) — `slow` (never answers), `stall` (one event, then silence), `trickle` (an event every
    `trickle_every_s`, `trickle_count` of them, then [DONE]); anything else gets `{"copy": name, "bytes": n}`
    (or a 500 while `fails`; its head and half its body, then a close, while `dies_midway`). `ended` is set
    when the proxy closes a connection it left unanswered or cut short; `cut` when it closed one mid-request-body."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[tuple[bytes, bytes]] = []  # (path, body) of each POST read whole
        self.ended = asyncio.Event()
        self.cut = asyncio.Event()
        self.trickle_every_s = 0.2
        self.trickle_count = 1000
        self.fails = False
        self.dies_midway = False
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def start(self) -> Copy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                try:
                    body = await _body(reader, head)
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.cut.set()
                    return
                path = head.split(b" ")[1]
                if path == b"/metrics":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    continue
                self.seen.append((path, body))
                what = path.split(b"?copy=", 1)[1] if b"?copy=" in path else path.rsplit(b"/", 1)[-1]
                if not await self._answer(what, body, reader, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def _answer(self, what: bytes, body: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is done with."""
        if what == b"slow":
            await reader.read()  # b"" once the proxy closes its end
            self.ended.set()
            return False
        if what == b"stall":
            writer.write(SSE_HEAD + chunk(EVENT))
            await writer.drain()
            await reader.read()
            self.ended.set()
            return False
        if what == b"trickle":
            writer.write(SSE_HEAD)
            for _ in range(self.trickle_count):
                writer.write(chunk(EVENT))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.trickle_every_s):  # the pace of a model's tokens
                        if not await reader.read(1):
                            self.ended.set()
                            return False
            writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
            return True
        if self.fails:
            answer = b'{"error": {"message": "failing", "type": "server_error", "code": 500}}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%b" % (len(answer), answer))
            await writer.drain()
            return True
        answer = json.dumps({"copy": self.name, "bytes": len(body)}).encode()
        if self.dies_midway:  # as a copy killed between writing its head and its body
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                         % (len(answer), answer[:len(answer) // 2]))
            await writer.drain()
            return False
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                     % (len(answer), answer))
        await writer.drain()
        return True


async def _body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    lower = head.lower()
    if b"content-length:" in lower:
        return await reader.readexactly(int(lower.split(b"content-length:")[1].split(b"\r\n")[0]))
    if b"transfer-encoding: chunked" not in lower:
        return b""
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return body
        body += data[:-2]


class PoolRoutes:
    """The control plane's routes: one public endpoint `ep-1` whose pool is `copies`, in order."""

    def __init__(self, copies: list[Copy], policy: str = "least_queue") -> None:
        self.copies, self.policy = copies, policy

    async def routes(self) -> RoutesTable:
        return RoutesTable.model_validate({"endpoints": [{
            "id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [], "service": "vllm",
            "service_url": None, "replicas": [], "routing_policy": self.policy,
            "pool": [{"copy_id": c.name, "url": c.url} for c in self.copies]}]})

    async def aclose(self) -> None:
        pass


@contextlib.asynccontextmanager
async def serving(app: Any, lifespan: str = "off") -> AsyncIterator[str]:
    """`app` under uvicorn on loopback (httptools, as in production); yields its base URL. With
    `lifespan="on"` the proxy starts its background tasks (the routes table's refresh among them)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http="httptools", lifespan=lifespan,
                                           log_level="critical", access_log=False))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:  # noqa: ASYNC110 — uvicorn offers a flag, not an event
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
