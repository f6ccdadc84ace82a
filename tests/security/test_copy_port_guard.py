"""Issue 29, finding 1: a copy's port answers only Berth, on every path.

vLLM's key check covers /v1, /v2, /inference and /cohere only; every rank is started with
`--middleware berth_rank_guard.CopyGuard` (rank/berth_rank_guard.py), which wants the same key everywhere
else too, `GET /health` (liveness, no body) excepted. Here the guard stands in front of the simulated copy
exactly as vLLM adds it (the simulator takes `--middleware` as vLLM does); tests/security/test_replica_access.py
shows the same through ranks the node agent starts, tests/e2e/test_real_engine.py on vLLM itself."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from rank import GUARD_DIR, GUARD_MIDDLEWARE
from rank.berth_rank_guard import CopyGuard
from simulator.cli import EngineConfig
from simulator.server import create_app
from simulator.testing import start_simulator

pytestmark = pytest.mark.timeout(60)
KEY = "copy-key-123"
ROOT = Path(__file__).resolve().parents[2]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
# Every route the simulated copy serves but /health, as (method, path): vLLM's unguarded ones included.
GUARDED = [("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/pooling"),
           ("POST", "/score"), ("POST", "/classify"), ("POST", "/rerank"), ("GET", "/ping"), ("GET", "/metrics"),
           ("GET", "/version"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/health"),
           ("OPTIONS", "/v1/chat/completions"), ("OPTIONS", "/tokenize"), ("GET", "/nowhere")]


@pytest.fixture
def guarded_copy(monkeypatch: pytest.MonkeyPatch) -> httpx.AsyncClient:
    monkeypatch.setenv("VLLM_API_KEY", KEY)  # as a rank's environment has it; the guard reads it there
    app = create_app(EngineConfig(model="m", served_model_names=("m",), api_key=KEY,
                                  middleware=("rank.berth_rank_guard.CopyGuard",)))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://copy")


@pytest.mark.parametrize(("method", "path"), GUARDED)
async def test_every_path_but_health_wants_the_copys_key(guarded_copy: httpx.AsyncClient, method: str,
                                                         path: str) -> None:
    async with guarded_copy as copy:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                        {"Authorization": f"Basic {KEY}"}):
            answer = await copy.request(method, path, json=CHAT if method == "POST" else None, headers=headers)
            assert answer.status_code == 401, (path, headers, answer.status_code)
            assert answer.json() == {"error": "Unauthorized: this port answers only Berth (send the copy's key)"}


async def test_two_authorization_headers_pass_only_if_both_are_the_key(guarded_copy: httpx.AsyncClient) -> None:
    """Starlette reads the first of two headers, others the last: the guard wants every one to be the key."""
    async with guarded_copy as copy:
        for pair in ((f"Bearer {KEY}", "Bearer wrong"), ("Bearer wrong", f"Bearer {KEY}")):
            headers = [("authorization", pair[0]), ("authorization", pair[1])]
            assert (await copy.post("/tokenize", json={"prompt": "x"}, headers=headers)).status_code == 401
        both = [("authorization", f"Bearer {KEY}"), ("authorization", f"bearer {KEY}")]
        assert (await copy.post("/tokenize", json={"prompt": "x"}, headers=both)).status_code == 200


async def test_berth_with_the_key_passes_and_health_is_open(guarded_copy: httpx.AsyncClient) -> None:
    async with guarded_copy as copy:
        health = await copy.get("/health")
        assert health.status_code == 200 and health.content == b""  # says "alive" and nothing else
        headers = {"Authorization": f"Bearer {KEY}"}
        assert (await copy.post("/invocations", json=CHAT, headers=headers)).json()["object"] == "chat.completion"
        assert (await copy.post("/tokenize", json={"prompt": "hello there"}, headers=headers)).json()["count"] == 2
        assert "vllm:num_requests_running" in (await copy.get("/metrics", headers=headers)).text


async def test_a_websocket_without_the_key_is_closed_before_it_opens() -> None:
    sent: list[dict[str, object]] = []

    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("the engine saw an unguarded WebSocket")

    async def record(message: dict[str, object]) -> None:
        sent.append(message)

    async def nothing() -> dict[str, object]:
        return {"type": "websocket.connect"}

    guard = CopyGuard(app, api_key=KEY)  # type: ignore[arg-type]
    await guard({"type": "websocket", "path": "/v1/realtime", "headers": []}, nothing, record)
    assert sent == [{"type": "websocket.close", "code": 1008}]


def test_the_guard_refuses_to_start_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard that let everything through would look like one: no key, no copy."""
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="needs VLLM_API_KEY"):
        CopyGuard(lambda *_: None)  # type: ignore[arg-type]


async def test_a_rank_process_loads_the_guard_by_its_bare_name_from_its_folder() -> None:
    """As the node agent starts a rank: `--middleware berth_rank_guard.CopyGuard`, the guard's folder first
    on PYTHONPATH (the simulator, like vLLM, imports it by that name)."""
    sim = await start_simulator("m", ["--middleware", GUARD_MIDDLEWARE], env={
        "VLLM_API_KEY": KEY, "PYTHONPATH": os.pathsep.join((str(GUARD_DIR), str(ROOT)))})
    try:
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=10) as client:
            assert (await client.post("/invocations", json=CHAT)).status_code == 401
            assert (await client.get("/health")).status_code == 200
            answer = await client.post("/invocations", json=CHAT, headers={"Authorization": f"Bearer {KEY}"})
            assert answer.status_code == 200
    finally:
        await sim.stop()


async def test_a_rank_without_its_key_never_serves() -> None:
    """The ASGI server builds the middleware at its first call: without a key every answer is a 500, /health
    included, so the readiness probe never passes and no request reaches the engine."""
    environment = {"PYTHONPATH": os.pathsep.join((str(GUARD_DIR), str(ROOT)))}
    sim = await start_simulator("m", ["--middleware", GUARD_MIDDLEWARE], env=environment, wait_ready=False)
    try:
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=5) as client:
            async def first_answer() -> httpx.Response:
                while True:
                    try:
                        return await client.get("/health")
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
            assert (await asyncio.wait_for(first_answer(), 30)).status_code == 500
            assert (await client.post("/invocations", json=CHAT)).status_code == 500
    finally:
        await sim.stop()
