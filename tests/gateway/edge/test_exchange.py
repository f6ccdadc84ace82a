"""Issue 15's body limit, upstream deadline and stream idle timeout, each hit and stayed under, through the
real endpoint proxy under uvicorn on loopback in front of raw loopback copies (and the model gateway's
share of the same limits, in process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.security import SigningKey, TokenVerifier
from berth.settings import ProxyLimits
from gateway.endpoint.endpoint_proxy import EndpointProxy
from gateway.models.model_gateway import ModelGateway
from tests.gateway.pool_copies import EVENT, Copy, PoolRoutes, serving

pytestmark = pytest.mark.timeout(60)
MIB = 1024 * 1024


@contextlib.asynccontextmanager
async def _proxy(tmp_path: Path, limits: ProxyLimits | None = None) -> AsyncIterator[tuple[str, Copy]]:
    """The endpoint proxy in front of one copy; yields ep-1's base URL and the copy."""
    copy = await Copy("c1").start()
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(PoolRoutes([copy]), TokenVerifier.from_jwks(key.jwks()))  # type: ignore[arg-type]
    if limits is not None:
        proxy.limits = limits
    await proxy.refresh()
    try:
        async with serving(proxy) as url:
            yield f"{url}/endpoints/ep-1", copy
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        copy.close()


def _error(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


async def _stream(client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None
                  ) -> tuple[list[str], BaseException | None, float]:
    """The data lines of a streamed completion, how reading it ended (None: cleanly), and how long it took."""
    lines: list[str] = []
    started = time.monotonic()
    async with client.stream("POST", url, json={"model": "m", "stream": True}, headers=headers) as response:
        assert response.status_code == 200
        try:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    lines.append(line)
        except httpx.HTTPError as error:
            return lines, error, time.monotonic() - started
    return lines, None, time.monotonic() - started


async def test_a_body_at_the_limit_passes_and_one_byte_over_is_413_before_it_is_read(tmp_path: Path) -> None:
    async with _proxy(tmp_path) as (url, copy), httpx.AsyncClient(timeout=30) as client:
        at_limit = await client.post(f"{url}/v1/completions?copy=echo", content=b"x" * MIB)
        assert at_limit.status_code == 200 and at_limit.json() == {"copy": "c1", "bytes": MIB}
        over = await client.post(f"{url}/v1/completions?copy=echo", content=b"x" * (MIB + 1))
        assert over.status_code == 413
        assert over.json() == {"error": {
            "message": "Request body is over the 1 MiB limit of this proxy; send a smaller one.",
            "type": "invalid_request_error", "param": None, "code": "body_limit_bytes"}}
        assert len(copy.seen) == 1  # the refused one never reached the copy


async def test_a_chunked_body_is_counted_as_it_streams(tmp_path: Path) -> None:
    async def body(size: int) -> AsyncIterator[bytes]:
        sent = 0
        while sent < size:
            part = min(64 * 1024, size - sent)
            sent += part
            yield b"y" * part

    async with _proxy(tmp_path) as (url, copy), httpx.AsyncClient(timeout=30) as client:
        under = await client.post(f"{url}/v1/completions?copy=echo", content=body(MIB))  # no Content-Length: chunked
        assert under.status_code == 200 and under.json()["bytes"] == MIB
        over = await client.post(f"{url}/v1/completions?copy=echo", content=body(MIB + 1))
        assert over.status_code == 413 and _error(over)["code"] == "body_limit_bytes"
        # The copy had the start of it: the proxy closed that connection mid-body, so it answers nothing.
        async with asyncio.timeout(10):
            await copy.cut.wait()
        assert len(copy.seen) == 1


@pytest.mark.parametrize("asked", ["0", "301", "abc", "", "nan"])
async def test_an_x_request_timeout_outside_1_to_300_s_is_a_400(tmp_path: Path, asked: str) -> None:
    async with _proxy(tmp_path) as (url, copy), httpx.AsyncClient(timeout=30) as client:
        response = await client.post(f"{url}/v1/completions?copy=echo", json={"model": "m"},
            headers={"x-request-timeout": asked})
        assert response.status_code == 400
        error = _error(response)
        assert error["param"] == "x-request-timeout" and error["type"] == "invalid_request_error"
        assert error["message"] == f"x-request-timeout must be a number of seconds from 1 to 300, not {asked!r}."
        assert copy.seen == []


@pytest.mark.parametrize("asked", ["1", "300", "2.5"])
async def test_an_x_request_timeout_inside_the_range_is_taken(tmp_path: Path, asked: str) -> None:
    async with _proxy(tmp_path) as (url, _copy), httpx.AsyncClient(timeout=30) as client:
        response = await client.post(f"{url}/v1/completions?copy=echo", json={"model": "m"},
            headers={"x-request-timeout": asked})
        assert response.status_code == 200


@pytest.mark.timeout(20)
async def test_a_slow_upstream_is_a_504_at_the_asked_deadline(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with _proxy(tmp_path) as (url, copy), httpx.AsyncClient(timeout=30) as client:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="berth.limits"):
            response = await client.post(f"{url}/v1/completions?copy=slow", json={"model": "m"},
                headers={"x-request-timeout": "2"})
        took = time.monotonic() - started
        assert response.status_code == 504 and 1.9 <= took < 4.0, took
        error = _error(response)
        assert (error["type"], error["code"]) == ("timeout_error", "upstream_deadline")
        assert "2 s deadline" in error["message"]
        async with asyncio.timeout(5):
            await copy.ended.wait()  # the proxy closed the upstream connection
        assert "request to ep-1: no answer within the 2 s deadline; answered 504" in caplog.text


@pytest.mark.timeout(20)
async def test_the_default_deadline_applies_without_the_header(tmp_path: Path) -> None:
    async with _proxy(tmp_path, ProxyLimits(upstream_deadline_s=1.0)) as (url, _copy), \
            httpx.AsyncClient(timeout=30) as client:
        started = time.monotonic()
        response = await client.post(f"{url}/v1/completions?copy=slow", json={"model": "m"})
        assert response.status_code == 504 and time.monotonic() - started < 3.0


@pytest.mark.timeout(20)
async def test_the_deadline_passing_mid_stream_ends_it_with_an_error_event(tmp_path: Path) -> None:
    async with _proxy(tmp_path) as (url, copy), httpx.AsyncClient(timeout=30) as client:
        lines, ended, took = await _stream(client, f"{url}/v1/completions?copy=trickle", {"x-request-timeout": "2"})
        assert isinstance(ended, httpx.RemoteProtocolError), ended  # aborted, never a clean end
        assert 1.9 <= took < 4.0, took
        assert lines[0] == EVENT.decode().strip() and "[DONE]" not in "".join(lines)
        error = json.loads(lines[-1].removeprefix("data:"))["error"]
        assert (error["type"], error["code"]) == ("timeout_error", "upstream_deadline")
        async with asyncio.timeout(5):
            await copy.ended.wait()


@pytest.mark.timeout(20)
async def test_a_stream_that_stalls_is_ended_after_the_idle_timeout(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    async with _proxy(tmp_path, ProxyLimits(stream_idle_s=1.0)) as (url, copy), \
            httpx.AsyncClient(timeout=30) as client:
        with caplog.at_level(logging.WARNING, logger="berth.limits"):
            lines, ended, took = await _stream(client, f"{url}/v1/completions?copy=stall")
        assert isinstance(ended, httpx.RemoteProtocolError), ended
        assert 0.9 <= took < 3.0, took
        assert lines[0] == EVENT.decode().strip()
        error = json.loads(lines[-1].removeprefix("data:"))["error"]
        assert error["code"] == "stream_idle" and "1 s" in error["message"]
        async with asyncio.timeout(5):
            await copy.ended.wait()
        cut = [r.getMessage() for r in caplog.records if r.name == "berth.limits"]
        assert cut == ["request to ep-1: no chunk from upstream for 1 s; stream ended"]


@pytest.mark.timeout(20)
async def test_a_stream_whose_chunks_come_within_the_idle_timeout_runs_to_its_end(tmp_path: Path) -> None:
    async with _proxy(tmp_path, ProxyLimits(stream_idle_s=1.0)) as (url, copy), \
            httpx.AsyncClient(timeout=30) as client:
        copy.trickle_every_s, copy.trickle_count = 0.3, 6  # 1.8 s in all: past the idle timeout, never idle
        lines, ended, _took = await _stream(client, f"{url}/v1/completions?copy=trickle")
        assert ended is None and lines[-1] == "data: [DONE]" and len(lines) == 7


async def test_the_model_gateway_applies_the_same_limits() -> None:
    gateway = ModelGateway(PoolRoutes([]), limits=ProxyLimits(body_limit_bytes=10))  # type: ignore[arg-type]

    async def ask(headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await gateway({"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": headers,
                       "query_string": b""}, receive, send)
        return sent[0]["status"], json.loads(sent[1]["body"])["error"]

    status, error = await ask([(b"content-length", b"11")], b"x" * 11)
    assert (status, error["code"]) == (413, "body_limit_bytes")
    status, error = await ask([], b"x" * 11)  # no Content-Length: counted as read
    assert (status, error["code"]) == (413, "body_limit_bytes")
    status, error = await ask([(b"x-request-timeout", b"301")], b"{}")
    assert (status, error["param"]) == (400, "x-request-timeout")
    await gateway.upstream.aclose()
