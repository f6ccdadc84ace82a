"""ASGI helpers both proxies share: reading a request's body and headers, and sending a whole answer (plain
text or JSON)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.edge import exchange
from gateway.edge.upstream import Receive, Send


async def body_stream(first: bytes, receive: Receive) -> AsyncIterator[bytes]:
    if first:
        yield first
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body"):
            return


async def whole_body(receive: Receive, limit: int) -> bytes | None:
    """The request body read whole, at most `limit` bytes (None: longer; what was read is dropped)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        if chunk:
            parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands out `body` once, whole, then what the client sends next (its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict[str, Any]:
        return pending.pop() if pending else await receive()
    return replayed


async def plain(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def json_answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def deadline(longest_s: float, headers: list[tuple[bytes, bytes]]) -> float:
    """How long a request may be held: `longest_s`, or less when the client says `x-request-timeout`."""
    return exchange.held_for(longest_s, headers)


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1").strip() or None
    return None
