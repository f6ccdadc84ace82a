"""Issue 31, items 8 and 12: a WebSocket upgrade on an endpoint path answers one 501 line (it was a bare 500
and "ASGI callable returned without completing handshake" in the log), on the endpoint proxy and the model
gateway under uvicorn on loopback; LiteLLM's /key/* on an endpoint that mints no keys (a copy, the LiteLLM
Model Gateway) says plainly that it does not and where keys are minted (it was 400 'names no "model"')."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from berth.security import SigningKey, TokenVerifier
from gateway.endpoint.endpoint_proxy import EndpointProxy
from gateway.models.model_gateway import ModelGateway
from tests.gateway.pool_copies import Copy, PoolRoutes, serving

pytestmark = pytest.mark.timeout(60)
UPGRADE = (b"GET %b HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
           b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n")


async def _raw(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    return answer


async def test_a_websocket_upgrade_is_one_501_line_on_the_proxy_and_the_gateway(tmp_path: Path) -> None:
    copy = await Copy("c1").start()
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(PoolRoutes([copy]), TokenVerifier.from_jwks(key.jwks()))  # type: ignore[arg-type]
    gateway = ModelGateway(PoolRoutes([]))  # type: ignore[arg-type]
    await proxy.refresh()
    try:
        for app, path in ((proxy, b"/endpoints/ep-1/v1/realtime"), (gateway, b"/v1/realtime")):
            async with serving(app) as url:
                answer = await _raw(url, UPGRADE % path)
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 501 "), answer
                assert body.count(b"\n") == 1 and b"WebSocket upgrades are not supported" in body
        assert copy.seen == []
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        await gateway.upstream.aclose()
        copy.close()


async def test_key_calls_on_an_endpoint_that_mints_no_keys_say_where_keys_are_minted(tmp_path: Path) -> None:
    gateway = ModelGateway(PoolRoutes([]))  # type: ignore[arg-type]
    try:
        async with serving(gateway) as url:
            request = (b"POST /key/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                       b"content-length: 2\r\nconnection: close\r\n\r\n{}")
            head, _, body = (await _raw(url, request)).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 404 ")
            error = json.loads(body)["error"]
            assert error["code"] == "keys_not_minted_here" and "berth key create" in error["message"]
    finally:
        await gateway.upstream.aclose()
