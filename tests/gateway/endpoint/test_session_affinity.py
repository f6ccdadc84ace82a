"""Session affinity (issue 15): `x-session-id`, or the first 64 characters of the prompt when it is absent
(among the copies the policy ranks equally good: all idle ones here), keeps a request on one copy among
the eligible ones; different sessions spread. Through the real endpoint
proxy under uvicorn in front of three loopback copies, and through the model gateway in process. The
prompt never reaches a log line."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.scopes import Scope
from berth.security import SigningKey, TokenVerifier
from gateway.edge import prompt_key, routing
from gateway.edge.exchange import Exchange
from gateway.endpoint import session_key
from gateway.endpoint.endpoint_proxy import EndpointProxy
from gateway.endpoint.route_table import Route
from gateway.models.model_gateway import ModelGateway, Pool
from tests.gateway.endpoint.test_endpoint_proxy_identity import RecordingUpstream
from tests.gateway.pool_copies import Copy, PoolRoutes, serving

pytestmark = pytest.mark.timeout(60)
SECRET = "the prompt nobody may log: " + "x" * 50  # longer than the 64 characters that count


@contextlib.asynccontextmanager
async def _pool(tmp_path: Path, policy: str = "least_queue") -> AsyncIterator[str]:
    copies = [await Copy(name).start() for name in ("c1", "c2", "c3")]
    key = SigningKey.load_or_create(tmp_path)
    # least_queue rotates among equal queues: only affinity keeps a request on one copy.
    proxy = EndpointProxy(PoolRoutes(copies, policy), TokenVerifier.from_jwks(key.jwks()))  # type: ignore[arg-type]
    await proxy.refresh()
    try:
        async with serving(proxy) as url:
            yield f"{url}/endpoints/ep-1/v1/chat/completions"
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        for copy in copies:
            copy.close()


def _chat(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                       {"role": "assistant", "content": "earlier"},
                                       {"role": "user", "content": text}]}


async def _copy(client: httpx.AsyncClient, url: str, body: dict[str, Any], session: str | None = None) -> str:
    response = await client.post(url, json=body, headers={"x-session-id": session} if session else None)
    assert response.status_code == 200
    name: str = response.json()["copy"]
    return name


async def test_one_prompt_keeps_its_copy_and_different_prompts_spread(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    async with _pool(tmp_path) as url, httpx.AsyncClient(timeout=30) as client:
        with caplog.at_level(logging.DEBUG):
            same = {await _copy(client, url, _chat(SECRET)) for _ in range(20)}
            # Only the first 64 characters count: what follows them does not move the request.
            longer = {await _copy(client, url, _chat(SECRET[:64] + f" then {n}")) for n in range(5)}
            spread = Counter([await _copy(client, url, _chat(f"question {n}")) for n in range(30)])
            completions = {await _copy(client, url, {"model": "m", "prompt": SECRET}) for _ in range(5)}
    assert len(same) == 1 and len(completions) == 1
    assert len(longer) == 1
    assert len(spread) >= 2, spread
    assert SECRET[:20] not in caplog.text


async def test_a_session_id_keeps_its_copy_and_sessions_spread(tmp_path: Path) -> None:
    async with _pool(tmp_path) as url, httpx.AsyncClient(timeout=30) as client:
        # The session wins over the prompt: one session, many prompts, one copy.
        one = {await _copy(client, url, _chat(f"prompt {n}"), session="session-a") for n in range(15)}
        sessions = Counter([await _copy(client, url, _chat(SECRET), session=f"session-{n}") for n in range(30)])
    assert len(one) == 1
    assert len(sessions) >= 2, sessions


async def test_prefix_affinity_keeps_a_shared_system_prompt_on_one_copy(tmp_path: Path) -> None:
    """Through the proxy (issue 36): the whole prompt's blocks, not its last message's first 64 characters, decide;
    a series sharing a long system prompt stays on one copy, series of other system prompts spread."""
    def chat(system: str, question: str) -> dict[str, Any]:
        return {"model": "m", "messages": [{"role": "system", "content": system},
                                           {"role": "user", "content": question}]}

    async with _pool(tmp_path, "prefix_affinity") as url, httpx.AsyncClient(timeout=30) as client:
        shared = "The operations manual, quoted in full for every question. " * 10
        series = {await _copy(client, url, chat(shared, f"question {n}")) for n in range(10)}
        others = {await _copy(client, url, chat(f"system prompt {n}: " + "y" * 300, "question")) for n in range(9)}
    assert len(series) == 1
    assert len(others) >= 2, others


async def test_the_body_is_not_read_when_there_is_no_choice_to_make() -> None:
    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError("nothing is sent")

    now = time.monotonic()
    one = routing.Replica(copy_id="c1", url="http://c1", metrics=routing.ReplicaMetrics(scraped_at=now))
    route = Route(id="ep-1", scope=Scope.PUBLIC, owner="alice", org="acme", groups=frozenset(), service_url=None,
                  replicas=[], pool=[one])
    exchange = Exchange(None, None, receive, send, "ep-1")
    assert await session_key.of_request(route, [], exchange) is None
    assert await session_key.of_request(route, [(b"x-session-id", b"s1")], exchange) == "s1"


def test_the_prompt_key_is_a_hash_of_the_first_64_characters() -> None:
    key = prompt_key.of_prompt(_chat(SECRET))
    assert key is not None and key.startswith("prompt:") and SECRET[:8] not in key
    assert key == prompt_key.of_prompt({"messages": [{"role": "user", "content": [
        {"type": "text", "text": SECRET[:30]}, {"type": "text", "text": SECRET[30:]}]}]})
    assert prompt_key.of_prompt({"model": "m"}) is None and prompt_key.of_prompt([1]) is None


async def test_the_model_gateway_keeps_a_prompt_on_one_copy() -> None:
    upstream = RecordingUpstream()
    gateway = ModelGateway(PoolRoutes([]), upstream=upstream)  # type: ignore[arg-type]
    now = time.monotonic()
    pool = Pool(endpoint_id="e1", workflow_id="wf", model_id="m", policy=routing.make("least_queue"))
    for name in ("c1", "c2", "c3"):
        pool.replicas[name] = routing.Replica(copy_id=name, url=f"http://{name}",
                                              metrics=routing.ReplicaMetrics(scraped_at=now))
    gateway.pools["e1"] = pool

    async def ask(body: dict[str, Any]) -> str:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            pass

        await gateway({"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": [],
                       "query_string": b""}, receive, send)
        return upstream.seen[-1][0]

    assert len({await ask(_chat(SECRET)) for _ in range(12)}) == 1
    assert len({await ask(_chat(f"question {n}")) for n in range(30)}) >= 2
