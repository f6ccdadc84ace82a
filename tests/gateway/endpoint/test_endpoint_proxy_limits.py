"""The limits on the real endpoint proxy (under uvicorn, the real API and SQLite store behind it, a loopback
copy in front of which it stands): cluster limits and an endpoint's override refuse with OpenAI-style 429 /
413 / 400 bodies naming the limit and a Retry-After; and two proxies sharing one real Redis
(tests/gateway/redis_server.py) hold one set of counters — a key with --max-concurrent 2 has its third
concurrent stream refused whichever proxy it reaches — and fail closed (503) when Redis is gone."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from berth.api_client import ApiClient
from berth.contracts import LimitPolicy, limit_policy_from
from berth.processes import free_port
from berth.security import TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.counters import MemoryCounters
from gateway.endpoint.endpoint_proxy import EndpointProxy
from gateway.endpoint.limits import Limiter
from gateway.endpoint.redis_counters import RedisCounters
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import EndpointRow
from tests.gateway.endpoint.test_endpoint_proxy_keys import ADMIN, ALICE, Copy, _error, _true, _until
from tests.gateway.redis_server import RedisServer

pytestmark = pytest.mark.timeout(90)
BUSY = b'vllm:num_requests_waiting{model_name="m"} 10\n'  # 10 requests waiting on the copy
HELD = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hold-me"}]}


@dataclass
class Proxies:
    context: ServerContext
    copy: Copy
    urls: list[str]
    keys: httpx.AsyncClient  # the API as alice

    async def key(self, **fields: Any) -> str:
        made = await self.keys.post("/v1/keys", json={"name": "k", "endpoint_id": "ep-a", **fields})
        assert made.status_code == 201, made.text
        return str(made.json()["key"])

    def token(self) -> str:
        return self.context.signing.endpoint_token(ALICE, "ep-a", 600)

    async def chat(self, credential: str, proxy: int = 0, headers: dict[str, str] | None = None,
                   **extra: Any) -> httpx.Response:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
        async with httpx.AsyncClient(timeout=30) as client:
            return await client.post(f"{self.urls[proxy]}/endpoints/ep-a/v1/chat/completions", json=body,
                                     headers={"authorization": f"Bearer {credential}", **(headers or {})})


def _publish(context: ServerContext, url: str, annotations: dict[str, Any]) -> None:
    with context.store.session() as session:
        session.add(EndpointRow(id="ep-a", workflow_id="wf-ep-a", service="vllm", scope="group", owner="alice",
                                org="acme", groups=["team"], created_at=time.time(), annotations=annotations))
    context.store.upsert_replica("wf-ep-a", "ep-a", "ep-a.copy-0", url, ready=True)


@contextlib.asynccontextmanager
async def _proxies(tmp_path: Path, limiters: list[Limiter], annotations: dict[str, Any] | None = None,
                   copy: Copy | None = None) -> AsyncIterator[Proxies]:
    """One API and store, one copy, and one endpoint proxy per limiter, each under its own uvicorn."""
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    copy = copy or Copy()
    server = await asyncio.start_server(copy.serve, "127.0.0.1", 0)
    _publish(context, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", annotations or {})
    app = create_app(context)
    apis, fronts, urls, serving = [], [], [], []
    for limiter in limiters:
        api = ApiClient("http://api", context.signing.api_token(ADMIN), transport=httpx.ASGITransport(app=app))
        proxy = EndpointProxy(api, TokenVerifier.from_jwks(context.signing.jwks()), signer=context.signing,
                              upstream=UpstreamPool(connect_timeout_s=2), limiter=limiter)
        await proxy.refresh()
        port = free_port()
        front = uvicorn.Server(uvicorn.Config(proxy, host="127.0.0.1", port=port, http="httptools",
                                              lifespan="off", log_level="critical", access_log=False))
        apis.append((api, proxy))
        fronts.append(front)
        urls.append(f"http://127.0.0.1:{port}")
        serving.append(asyncio.create_task(front.serve()))
    keys = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                             headers={"Authorization": f"Bearer {context.signing.api_token(ALICE, 600)}"})
    try:
        for front in fronts:
            await _until(lambda front=front: _true(front.started), "the proxy to start")  # type: ignore[misc]
        yield Proxies(context, copy, urls, keys)
    finally:
        for front in fronts:
            front.should_exit = True
        await asyncio.wait_for(asyncio.gather(*serving), 10)
        await keys.aclose()
        for api, proxy in apis:
            await proxy.admission.aclose()
            await proxy.upstream.aclose()
            await api.aclose()
        server.close()


def _memory(policy: dict[str, Any]) -> Limiter:
    return Limiter(limit_policy_from(policy, "the test"), MemoryCounters())


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_user_limit_refuses_past_it_with_retry_after_and_admits_under_it(tmp_path: Path) -> None:
    async with _proxies(tmp_path, [_memory({"user": {"requests_per_minute": 2}})]) as stack:
        token = stack.token()
        assert [(await stack.chat(token)).status_code for _ in range(2)] == [200, 200]
        refused = await stack.chat(token)
        assert refused.status_code == 429 and _error(refused)["code"] == "requests_per_minute"
        assert "user alice" in _error(refused)["message"]
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert len(stack.copy.completions()) == 2  # the refused one never reached the copy


async def test_the_body_limit_the_priority_header_and_an_endpoint_override(tmp_path: Path) -> None:
    cluster = _memory({"body_limit_bytes": 2048})
    override = {"limits": {"max_tokens": 100}, "max_context": 64}
    async with _proxies(tmp_path, [cluster], override) as stack:
        token = stack.token()
        assert (await stack.chat(token, max_tokens=50)).status_code == 200  # under every limit
        big = await stack.chat(token, padding="x" * 4096)
        assert big.status_code == 413 and _error(big)["code"] == "body_limit_bytes"
        capped = await stack.chat(token, max_tokens=101)
        assert capped.status_code == 413 and _error(capped)["code"] == "max_tokens"
        bad = await stack.chat(token, headers={"x-request-priority": "urgent"})
        assert bad.status_code == 400 and _error(bad)["code"] == "priority"
        assert (await stack.chat(token, headers={"x-request-priority": "low"})).status_code == 200
        assert len(stack.copy.completions()) == 2


async def test_the_context_check_uses_the_pools_max_context(tmp_path: Path) -> None:
    async with _proxies(tmp_path, [_memory({"context_check": True})], {"max_context": 64}) as stack:
        token = stack.token()
        assert (await stack.chat(token, max_tokens=32)).status_code == 200  # ~1 + 32 ≤ 64
        over = await stack.chat(token, max_tokens=32, messages=[{"role": "user", "content": "w" * 200}])
        assert over.status_code == 413 and _error(over)["code"] == "context"


@pytest.mark.parametrize(("threshold", "admitted"), [(4, set()), (8, {"high"}), (12, {"normal", "high"}),
                                                     (24, {"low", "normal", "high"})])
async def test_load_shedding_by_priority(tmp_path: Path, threshold: int, admitted: set[str]) -> None:
    """10 waiting on the only copy: shed at ½×, 1×, 2× the threshold for low, normal, high (granted)."""
    policy = _memory({"shed_queue_depth": threshold, "high_priority": True})
    async with _proxies(tmp_path, [policy], copy=Copy(metrics=BUSY)) as stack:
        token = stack.token()
        passed = set()
        for priority in ("low", "normal", "high"):
            answer = await stack.chat(token, headers={"x-request-priority": priority})
            if answer.status_code == 200:
                passed.add(priority)
            else:
                assert answer.status_code == 429 and _error(answer)["code"] == "shed_queue_depth"
                assert answer.headers["retry-after"] == "1"
        assert passed == admitted


@pytest.mark.redis
async def test_two_proxies_share_a_keys_max_concurrent_through_redis(tmp_path: Path,
                                                                     redis_server: RedisServer) -> None:
    limiters = [Limiter(LimitPolicy(), RedisCounters(redis_server.url)) for _ in range(2)]
    async with _proxies(tmp_path, limiters) as stack:
        key = await stack.key(max_concurrent=2)
        async with contextlib.AsyncExitStack() as held, httpx.AsyncClient(timeout=30) as client:
            for proxy in (0, 1):  # one stream held through each proxy
                stream = await held.enter_async_context(client.stream(
                    "POST", f"{stack.urls[proxy]}/endpoints/ep-a/v1/chat/completions", json=HELD,
                    headers={"authorization": f"Bearer {key}"}))
                assert stream.status_code == 200
            for proxy in (0, 1):
                third = await stack.chat(key, proxy)
                assert third.status_code == 429 and _error(third)["code"] == "max_concurrent", third.text
        # Both clients left: their slots are free on both proxies.

        async def admitted_again() -> bool:
            return stack.copy.held == 0 and (await stack.chat(key, 1)).status_code == 200
        await _until(admitted_again, "a slot freed after the clients left")


@pytest.mark.redis
async def test_keyed_requests_fail_closed_when_redis_is_gone(tmp_path: Path, redis_server: RedisServer) -> None:
    async with _proxies(tmp_path, [Limiter(LimitPolicy(), RedisCounters(redis_server.url))]) as stack:
        key = await stack.key(max_concurrent=2)
        assert (await stack.chat(key)).status_code == 200
        redis_server.stop()
        down = await stack.chat(key)
        assert down.status_code == 503 and _error(down)["code"] == "shared_counters", down.text
        redis_server.start()

        async def back() -> bool:  # the first request after may meet a stale pooled connection: closed too
            return (await stack.chat(key)).status_code == 200
        await _until(back, "admitted again once Redis is back")
