"""HeadHeld (berth/head_held.py): a whole answer leaves a Berth server in one write, a stream's head leaves before
its body, and no write is lost or reordered (issue 33: a write is the dearest thing a proxied request does)."""

from __future__ import annotations

import asyncio
import socket
from asyncio import selector_events
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from berth.head_held import HeadHeld
from berth.http_guard import guarded_protocol
from berth.processes import free_port
from berth.settings.connections import ConnectionLimits

pytestmark = pytest.mark.timeout(30)


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def test_a_head_and_body_of_one_step_are_one_write_and_a_lone_head_leaves_at_the_steps_end() -> None:
    loop = asyncio.get_running_loop()
    whole, recorded = HeadHeld(Recording(), loop), Recording()  # type: ignore[arg-type]
    whole._transport = recorded  # type: ignore[assignment]
    whole.write(b"HEAD;")
    whole.write(b"BODY")
    assert recorded.writes == [b"HEAD;BODY"]
    whole.write(b"MORE")  # after the first, writes go straight out
    await asyncio.sleep(0)
    assert recorded.writes == [b"HEAD;BODY", b"MORE"]

    streamed = HeadHeld(Recording(), loop)  # type: ignore[arg-type]
    out: Recording = streamed._transport  # type: ignore[assignment]
    streamed.write(b"HEAD;")
    assert out.writes == []
    await asyncio.sleep(0)  # the step ended: the head is out before anything after it
    assert out.writes == [b"HEAD;"]
    streamed.write(b"EVENT")
    assert out.writes == [b"HEAD;", b"EVENT"]

    closing = HeadHeld(Recording(), loop)  # type: ignore[arg-type]
    closing.write(b"HEAD;")
    closing.close()  # an answer that ends the connection: what is held goes first
    assert closing._transport.writes == [b"HEAD;"] and closing.is_closing()  # type: ignore[attr-defined]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await receive()
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await asyncio.sleep(0.3)  # the head must not wait for this
        await send({"type": "http.response.body", "body": b"data: 1\n\n"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"whole"})


@pytest.fixture
async def server() -> AsyncIterator[int]:
    port = free_port()
    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="critical",
                                           http=guarded_protocol(ConnectionLimits())))
    task = asyncio.create_task(served.serve())
    async with asyncio.timeout(10):
        while not served.started:  # noqa: ASYNC110 — uvicorn offers a flag, not an event
            await asyncio.sleep(0.01)
    yield port
    served.should_exit = True
    await asyncio.wait_for(task, 10)


async def _read_until(reader: asyncio.StreamReader, end: bytes) -> bytes:
    data = b""
    while end not in data:
        chunk = await reader.read(65536)
        assert chunk, data
        data += chunk
    return data


async def test_through_uvicorn_a_whole_answer_is_one_write_and_a_streams_head_leaves_before_its_body(
        server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[bytes] = []  # what the server's socket transport was asked to write, an answer a write
    transport_class: Any = selector_events._SelectorSocketTransport  # type: ignore[attr-defined]  # the loop's own
    write = transport_class.write

    def recording(self: Any, data: bytes) -> None:
        if bytes(data).startswith(b"HTTP/1.1"):
            answers.append(bytes(data))
        write(self, data)

    monkeypatch.setattr(transport_class, "write", recording)
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(3):  # kept alive: each answer of the connection is whole
        writer.write(b"GET /whole HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await _read_until(reader, b"whole")).endswith(b"\r\n\r\nwhole")
    assert len(answers) == 3 and all(answer.endswith(b"\r\n\r\nwhole") for answer in answers), answers
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    async with asyncio.timeout(0.25):  # well before the body's 0.3 s
        head = await _read_until(reader, b"\r\n\r\n")
    assert b"text/event-stream" in head and b"data: 1" not in head
    assert b"data: 1" in await _read_until(reader, b"data: 1\n\n")
    writer.close()
