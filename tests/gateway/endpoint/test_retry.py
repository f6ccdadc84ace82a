"""One retry (issue 15): a non-streamed request whose copy refuses the connection (nothing sent, no byte
back) goes once to another ready copy; a streamed one is not sent again. The endpoint proxy in process
with its real upstream pool, in front of two loopback copies, the first of which stops listening after
the proxy scraped it (so it is still routable)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from berth.security import SigningKey, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.gateway.pool_copies import Copy, PoolRoutes

pytestmark = pytest.mark.timeout(60)


async def _ask_once(tmp_path: Path, body: dict[str, Any]) -> tuple[int, bytes, Copy, Copy]:
    first, second = await Copy("c1").start(), await Copy("c2").start()
    key = SigningKey.load_or_create(tmp_path)
    # Round robin starts with the pool's first copy: c1.
    proxy = EndpointProxy(PoolRoutes([first, second], policy="round_robin"),  # type: ignore[arg-type]
                          TokenVerifier.from_jwks(key.jwks()), upstream=UpstreamPool(connect_timeout_s=2))
    await proxy.refresh()
    first.close()  # c1 stops listening: its connect is refused
    assert first.server is not None
    await first.server.wait_closed()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/endpoints/ep-1/v1/chat/completions", "method": "POST",
             "headers": [(b"content-type", b"application/json")], "query_string": b""}
    try:
        await proxy(scope, receive, send)
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        second.close()
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), first, second


async def test_a_refused_connect_of_a_whole_request_is_sent_once_to_another_copy(tmp_path: Path) -> None:
    status, body, first, second = await _ask_once(tmp_path, {"model": "m", "messages": []})
    assert status == 200 and json.loads(body)["copy"] == "c2"
    assert first.seen == [] and len(second.seen) == 1


async def test_a_refused_connect_of_a_streamed_request_is_not_sent_again(tmp_path: Path) -> None:
    status, body, _first, second = await _ask_once(tmp_path, {"model": "m", "messages": [], "stream": True})
    assert status == 502 and json.loads(body)["error"]["code"] == 502
    assert second.seen == []
