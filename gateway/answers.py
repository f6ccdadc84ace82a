"""The endpoint proxy's own answers (401/403/404/429/502/503, in OpenAI's error shape where a client reads
them as such) and the small request helpers it shares with its hold and replay code."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from berth.scopes import Scope
from gateway import deadlines
from gateway.route_table import Route
from gateway.routing import Replica
from gateway.upstream import Receive, Send


def forbidden(endpoint_id: str, route: Route) -> str:
    """The 403 body: which scope shut the caller out."""
    who = {Scope.USER: f"only its owner ({route.owner})", Scope.GROUP: "members of its groups",
           Scope.ORGANIZATION: f"members of organization {route.org}"}.get(route.scope, "")
    return (f"Forbidden: endpoint {endpoint_id} is {route.scope.value}-scoped ({who} may call it) "
            "and you are outside it")


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


async def upstream_failed(send: Send, route: Route, target: Replica) -> None:
    """No answer from upstream, nothing sent to the client. A Proxy=true endpoint's LiteLLM that refuses
    or resets the connection is down and being started again (PoolWorkflow's back-off): 503 with
    Retry-After, as documented (docs/architecture.md), not a 502 that reads as a broken model."""
    if route.fronts_pool and target.copy_id == "service":
        await front_restarting(send)
        return
    await json_answer(send, 502, b'{"error":{"message":"The model service did not answer; '
                           b'retry shortly.","type":"bad_gateway","code":502}}')


async def front_restarting(send: Send) -> None:
    """A Proxy=true endpoint's LiteLLM is down and being started again: the documented 503."""
    await json_answer(send, 503, b'{"error":{"message":"The endpoint\'s LiteLLM proxy is not answering (it is '
                      b'being restarted); retry shortly.","type":"service_unavailable","code":503}}',
                      [(b"retry-after", b"5")])


async def json_answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def deadline(longest_s: float, headers: list[tuple[bytes, bytes]]) -> float:
    """How long a request may be held: `longest_s`, or less when the client says `x-request-timeout`."""
    return deadlines.held_for(longest_s, headers)


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1").strip() or None
    return None
