"""The per-model LiteLLM proxy as Berth runs it: a real litellm process, its hooks, its error texts."""

# One LiteLLM process (plus one without a reachable JWKS) serves the whole module: each takes
# about 6 s to start. Around it, on loopback: a "control plane" (replica list, JWKS, rate sink) in a
# thread, and two engine simulators (`python -m simulator serve`, the vLLM double) as the replicas,
# each answering with its own fixed reply so a test can tell which one served.

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import httpx2
import jwt
import openai
import pytest
import pytest_asyncio
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import FastAPI, Request
from fastapi.responses import Response
from jwt.algorithms import OKPAlgorithm
from pydantic import SecretStr

from activities.litellm_service import (
    LiteLLMProcess,
    LiteLLMServiceSpec,
    find_litellm_executable,
    prepare_launch,
)
from gateway.edge.metrics import SCRAPE_INTERVAL_S, parse

pytestmark = pytest.mark.litellm  # starts the real LiteLLM proxy

MODEL: Final = "openai/gpt-oss-20b"
ENDPOINT_ID: Final = "endpoint-0b7e"
KID: Final = "berth-test-1"
NO_KEY: Final = {
    "error": {
        "message": "Authentication Error, No api key passed in.",
        "type": "auth_error",
        "param": "None",
        "code": "401",
    }
}
INVALID_KEY: Final = {
    "error": {
        "message": "Authentication Error, Invalid proxy server token passed",
        "type": "auth_error",
        "param": "None",
        "code": "401",
    }
}
LISTED: Final = {
    "data": [{"id": MODEL, "object": "model", "created": 1677610602, "owned_by": "openai"}],
    "object": "list",
}
CHAT: Final = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
FOLLOW_WITHIN_S: Final = 3.0  # the sync polls every 1 s; the rest is slack for a busy 2-core machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ThreadedServer:
    """A uvicorn server on a loopback socket, in a thread with its own event loop."""

    def __init__(self, app: FastAPI) -> None:
        self._socket: Final = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port: Final[int] = self._socket.getsockname()[1]
        self.url: Final = f"http://127.0.0.1:{self.port}"
        self._server: Final = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread: Final = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]})

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        deadline: Final = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()


REPO_ROOT: Final = Path(__file__).resolve().parents[3]
SIMULATOR_ROOT: Final = REPO_ROOT


@dataclass(frozen=True)
class Engine:
    """One running engine simulator, serving MODEL under its own fixed reply."""

    process: asyncio.subprocess.Process
    url: str
    log_path: Path

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


async def start_engine(name: str, log_path: Path, knobs: Mapping[str, str] | None = None) -> Engine:
    if not (SIMULATOR_ROOT / "simulator" / "__main__.py").exists():
        pytest.fail(f"no engine simulator under {SIMULATOR_ROOT}")
    port: Final = free_port()
    environment: Final = {
        **{key: value for key, value in os.environ.items() if not key.startswith("BERTH_SIM_")},
        "PYTHONPATH": str(SIMULATOR_ROOT),
        "BERTH_SIM_REPLY": f"hello from {name}",
        "BERTH_SIM_TOKENS_PER_SECOND": "0",
        **(knobs or {}),
    }
    log: Final = await asyncio.to_thread(log_path.open, "wb")
    with log:
        process: Final = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "simulator",
            "serve",
            MODEL,
            "--port",
            str(port),
            "--served-model-name",
            MODEL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=environment,
        )
    engine: Final = Engine(process=process, url=f"http://127.0.0.1:{port}", log_path=log_path)
    deadline: Final = time.monotonic() + 20
    async with httpx.AsyncClient(timeout=1, trust_env=False) as http:
        while True:
            try:
                if (await http.get(f"{engine.url}/health")).status_code == 200:
                    return engine
            except httpx.TransportError:
                pass
            if process.returncode is not None or time.monotonic() > deadline:
                await engine.stop()
                raise RuntimeError(f"engine simulator {name} did not start; see {log_path}")
            await asyncio.sleep(0.05)


@dataclass
class ControlPlane:
    """What the control plane publishes to the LiteLLM process, and what it hears back."""

    private_key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    replicas: list[dict[str, Any]] = field(default_factory=list)
    rate_reports: list[dict[str, Any]] = field(default_factory=list)
    minted: list[str] = field(default_factory=list)
    routing_policy: str = "least_queue"

    def app(self) -> FastAPI:
        app: Final = FastAPI()

        @app.get("/replicas")
        async def replicas() -> dict[str, Any]:
            return {"replicas": list(self.replicas), "routing_policy": self.routing_policy}

        @app.get("/jwks")
        async def jwks() -> dict[str, Any]:
            public: Final = OKPAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
            return {"keys": [{**public, "kid": KID, "use": "sig", "alg": "EdDSA"}]}

        @app.post("/rate")
        async def rate(request: Request) -> Response:
            self.rate_reports.append(await request.json())
            return Response(status_code=204)

        return app

    def set_replicas(self, *replicas: tuple[str, Engine, bool]) -> None:
        self.replicas = [
            {"id": name, "url": f"{engine.url}/v1", "ready": ready} for name, engine, ready in replicas
        ]

    def assertion(
        self,
        *,
        subject: str = "alice",
        audience: str = ENDPOINT_ID,
        issuer: str = "berth",
        expires_in: float = 30,
        key: Ed25519PrivateKey | None = None,
        kid: str = KID,
    ) -> str:
        now: Final = int(time.time())
        claims: Final = {
            "iss": issuer,
            "aud": audience,
            "sub": subject,
            "groups": ["ml"],
            "org": "acme",
            "iat": now,
            "exp": now + int(expires_in),
        }
        token: Final = jwt.encode(claims, key or self.private_key, algorithm="EdDSA", headers={"kid": kid})
        self.minted.append(token)
        return token


@dataclass(frozen=True)
class Stack:
    control: ControlPlane
    upstream_a: Engine
    upstream_b: Engine
    proxy: LiteLLMProcess
    proxy_without_jwks: LiteLLMProcess
    master_key: str
    log_path: Path
    start_seconds: float


def litellm_executable() -> str:
    try:
        return find_litellm_executable()
    except FileNotFoundError:
        pass
    # A linked worktree has no .venv-litellm of its own: use the main checkout's.
    common_dir: Final = subprocess.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent,
    ).stdout.strip()
    candidate: Final = Path(common_dir).parent / ".venv-litellm" / "bin" / "litellm"
    if not common_dir or not candidate.exists():
        pytest.fail("no litellm executable: run `make litellm` or set BERTH_LITELLM_BIN")
    return str(candidate)


@pytest.fixture(scope="module")
def control_plane() -> Iterator[tuple[ControlPlane, ThreadedServer]]:
    control: Final = ControlPlane()
    with ThreadedServer(control.app()) as control_server:
        yield control, control_server


@pytest_asyncio.fixture(scope="module")
async def engines(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Engine, Engine]]:
    logs: Final = tmp_path_factory.mktemp("engines")
    engine_a, engine_b = await asyncio.gather(
        start_engine("A", logs / "a.log"), start_engine("B", logs / "b.log")
    )
    try:
        yield engine_a, engine_b
    finally:
        await asyncio.gather(engine_a.stop(), engine_b.stop())


@pytest_asyncio.fixture(scope="module")
async def stack(
    control_plane: tuple[ControlPlane, ThreadedServer],
    engines: tuple[Engine, Engine],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Stack]:
    control, control_server = control_plane
    upstream_a, upstream_b = engines
    executable: Final = litellm_executable()
    master_key: Final = f"sk-berth-{secrets.token_urlsafe(24)}"
    spec: Final = LiteLLMServiceSpec(
        model_name=MODEL,
        master_key=SecretStr(master_key),
        replicas_url=f"{control_server.url}/replicas",
        endpoint_id=ENDPOINT_ID,
        jwks_url=f"{control_server.url}/jwks",
        rate_url=f"{control_server.url}/rate",
        port=free_port(),
    )
    # Same pool, but its JWKS URL answers nothing: the "nodes have not picked up the signing keys" case.
    unreachable_spec: Final = spec.model_copy(
        update={"jwks_url": f"http://127.0.0.1:{free_port()}/jwks", "port": free_port()}
    )
    workdir: Final = tmp_path_factory.mktemp("litellm")
    launch: Final = prepare_launch(spec, workdir / "main", executable)
    unreachable_launch: Final = prepare_launch(unreachable_spec, workdir / "unreachable", executable)
    log_path: Final = workdir / "litellm.log"
    started: Final = time.monotonic()
    proxy: Final = await LiteLLMProcess.start(launch, log_path)
    proxy_without_jwks: Final = await LiteLLMProcess.start(unreachable_launch, workdir / "unreachable.log")
    try:
        await asyncio.gather(proxy.wait_ready(90), proxy_without_jwks.wait_ready(90))
        yield Stack(
            control=control,
            upstream_a=upstream_a,
            upstream_b=upstream_b,
            proxy=proxy,
            proxy_without_jwks=proxy_without_jwks,
            master_key=master_key,
            log_path=log_path,
            start_seconds=time.monotonic() - started,
        )
    finally:
        await asyncio.gather(proxy.stop(), proxy_without_jwks.stop())


@pytest_asyncio.fixture(scope="module")
async def client(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.proxy.base_url, timeout=30, trust_env=False) as http:
        yield http


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def caller(token: str) -> dict[str, str]:
    return {"x-berth-caller": token}


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout_s: float = FOLLOW_WITHIN_S) -> float:
    started: Final = time.monotonic()
    while not await predicate():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def listed_ids(client: httpx.AsyncClient, key: str) -> list[str]:
    response: Final = await client.get("/v1/models", headers=bearer(key))
    assert response.status_code == 200, response.text
    return [model["id"] for model in response.json()["data"]]


async def routed_replicas(client: httpx.AsyncClient, key: str) -> list[str]:
    response: Final = await client.get("/berth/requests", headers=bearer(key))
    assert response.status_code == 200, response.text
    replicas: list[str] = response.json()["replicas"]
    return replicas


async def serve(stack: Stack, client: httpx.AsyncClient, *replicas: tuple[str, Engine, bool]) -> float:
    """Publish `replicas`; return the seconds until LiteLLM routes to exactly the ready ones."""
    stack.control.set_replicas(*replicas)
    expected: Final = sorted(name for name, _, ready in replicas if ready)

    async def follows() -> bool:
        return await routed_replicas(client, stack.master_key) == expected

    return await wait_until(follows)


async def answers(
    client: httpx.AsyncClient, key: str, requests: int, headers: Mapping[str, str] | None = None
) -> list[str]:
    """The reply to each of `requests` chats sent one after the other: it names the replica that served."""
    replies: Final = []
    for _ in range(requests):
        response = await client.post("/v1/chat/completions", headers={**bearer(key), **(headers or {})}, json=CHAT)
        assert response.status_code == 200, response.text
        replies.append(response.json()["choices"][0]["message"]["content"])
    return replies


async def served_by(
    client: httpx.AsyncClient, key: str, requests: int, headers: Mapping[str, str] | None = None
) -> set[str]:
    return set(await answers(client, key, requests, headers))


async def test_starts_within_seconds(stack: Stack) -> None:
    # Two processes started at once on a shared 2-core machine; alone one takes about 6 s.
    assert stack.start_seconds < 45


async def test_no_replica_ready_lists_nothing_and_chat_is_an_invalid_model(
    stack: Stack, client: httpx.AsyncClient
) -> None:
    await serve(stack, client, ("a", stack.upstream_a, False))
    token: Final = stack.control.assertion()

    listing: Final = await client.get("/v1/models", headers=caller(token))
    assert listing.status_code == 200
    assert listing.json() == {"data": [], "object": "list"}

    chat: Final = await client.post("/v1/chat/completions", headers=caller(token), json=CHAT)
    assert chat.status_code == 400
    assert "Invalid model name" in chat.json()["error"]["message"]


async def test_assertion_alone_admits(stack: Stack, client: httpx.AsyncClient) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True))

    listing: Final = await client.get("/v1/models", headers=caller(stack.control.assertion()))
    assert listing.status_code == 200
    assert listing.json() == LISTED

    chat: Final = await client.post(
        "/v1/chat/completions", headers=caller(stack.control.assertion()), json=CHAT
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"] == "hello from A"


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    # Flip a character in the middle of the signature: the last one may only carry padding bits.
    middle: Final = len(signature) // 2
    flipped: Final = "A" if signature[middle] != "A" else "B"
    return ".".join((header, payload, signature[:middle] + flipped + signature[middle + 1 :]))


BAD_ASSERTIONS: Final[dict[str, Callable[[ControlPlane], dict[str, str]]]] = {
    "absent": lambda control: {},
    "empty": lambda control: caller(""),
    "garbage": lambda control: caller("not-a-jwt"),
    "tampered": lambda control: caller(tampered(control.assertion())),
    "expired": lambda control: caller(control.assertion(expires_in=-30)),
    "wrong audience": lambda control: caller(control.assertion(audience="another-endpoint")),
    "wrong issuer": lambda control: caller(control.assertion(issuer="someone-else")),
    "lives too long": lambda control: caller(control.assertion(expires_in=3600)),
    "unknown signer": lambda control: caller(control.assertion(key=Ed25519PrivateKey.generate())),
    "unknown kid": lambda control: caller(control.assertion(kid="not-published")),
    "unsigned": lambda control: caller(
        jwt.encode(
            {"iss": "berth", "aud": ENDPOINT_ID, "sub": "mallory", "exp": int(time.time()) + 30}, "", "none"
        )
    ),
}


@pytest.mark.parametrize("case", BAD_ASSERTIONS)
async def test_without_key_or_valid_assertion_the_answer_is_no_api_key(
    stack: Stack, client: httpx.AsyncClient, case: str
) -> None:
    response: Final = await client.get("/v1/models", headers=BAD_ASSERTIONS[case](stack.control))
    assert response.status_code == 401
    assert response.json() == NO_KEY


async def test_unreachable_jwks_means_no_api_key_and_the_key_still_works(stack: Stack) -> None:
    async with httpx.AsyncClient(
        base_url=stack.proxy_without_jwks.base_url, timeout=30, trust_env=False
    ) as other:
        token: Final = stack.control.assertion()
        for _ in range(3):  # the first fetch fails; the next ones answer without waiting on the network
            started = time.monotonic()
            response = await other.get("/v1/models", headers=caller(token))
            assert response.status_code == 401
            assert response.json() == NO_KEY
            assert time.monotonic() - started < 2.5
        with_key: Final = await other.get("/v1/models", headers=bearer(stack.master_key))
        assert with_key.status_code == 200


@pytest.mark.parametrize("header", ["Authorization", "x-litellm-api-key"])
async def test_master_key_admits(stack: Stack, client: httpx.AsyncClient, header: str) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True))
    value: Final = f"Bearer {stack.master_key}" if header == "Authorization" else stack.master_key
    response: Final = await client.get("/v1/models", headers={header: value})
    assert response.status_code == 200
    assert response.json() == LISTED


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(lambda key: {"Authorization": "Bearer sk-berth-stale"}, id="wrong bearer"),
        pytest.param(lambda key: {"x-litellm-api-key": "sk-berth-stale"}, id="wrong x-litellm-api-key"),
        pytest.param(lambda key: {"Authorization": f"Bearer {key}x"}, id="master key plus a character"),
        pytest.param(
            lambda key: {"Authorization": f"Bearer {key}", "x-litellm-api-key": "sk-berth-stale"},
            id="x-litellm-api-key wins over a right bearer",
        ),
    ],
)
async def test_wrong_key_is_refused_even_with_a_valid_assertion(
    stack: Stack, client: httpx.AsyncClient, headers: Callable[[str], dict[str, str]]
) -> None:
    sent: Final = {**headers(stack.master_key), **caller(stack.control.assertion())}
    for route in ("/v1/models", "/v1/chat/completions"):
        response = await client.request(
            "GET" if route == "/v1/models" else "POST", route, headers=sent, json=CHAT
        )
        assert response.status_code == 401, route
        assert response.json() == INVALID_KEY


@pytest.mark.parametrize(
    ("method", "route"),
    [
        ("POST", "/key/generate"),
        ("GET", "/key/list"),
        ("GET", "/user/info"),
        ("POST", "/model/new"),
        ("GET", "/model/info"),
        ("GET", "/team/list"),
        ("GET", "/config/yaml"),
        ("GET", "/global/spend"),
        ("GET", "/spend/logs"),
        ("GET", "/berth/requests"),
    ],
)
async def test_assertion_does_not_reach_admin_routes(
    stack: Stack, client: httpx.AsyncClient, method: str, route: str
) -> None:
    response: Final = await client.request(method, route, headers=caller(stack.control.assertion()), json={})
    assert response.status_code == 403, response.text
    assert response.json()["error"]["message"] == (
        f"user not allowed to access this route. Route={route} is an admin only route"
    )


async def test_assertion_reaches_health(stack: Stack, client: httpx.AsyncClient) -> None:
    response: Final = await client.get("/health/readiness", headers=caller(stack.control.assertion()))
    assert response.status_code == 200


def endpoint_proxy_client(stack: Stack) -> httpx2.AsyncClient:
    """What Berth's endpoint proxy does to a request: drop the Berth token, add a fresh assertion."""

    async def swap_credentials(request: httpx2.Request) -> None:
        del request.headers["authorization"]
        request.headers["x-berth-caller"] = stack.control.assertion()

    return httpx2.AsyncClient(event_hooks={"request": [swap_credentials]}, trust_env=False)


@pytest.mark.parametrize("credential", ["master key", "assertion"])
async def test_openai_sdk_chats_streamed_and_not(
    stack: Stack, client: httpx.AsyncClient, credential: str
) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True))
    http_client: Final = endpoint_proxy_client(stack) if credential == "assertion" else None
    sdk: Final = openai.AsyncOpenAI(
        base_url=f"{stack.proxy.base_url}/v1",
        api_key=stack.master_key if credential == "master key" else "berth-endpoint-token",
        http_client=http_client,
        max_retries=0,
    )
    async with sdk:
        models: Final = await sdk.models.list()
        assert [model.id for model in models.data] == [MODEL]

        completion: Final = await sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
        assert completion.choices[0].message.content == "hello from A"

        stream: Final = await sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        pieces: Final = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        assert "".join(pieces) == "hello from A"
        assert len([piece for piece in pieces if piece]) == 3  # streamed, not buffered into one chunk


async def test_openai_sdk_completions_streamed_and_not(stack: Stack, client: httpx.AsyncClient) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True))
    sdk: Final = openai.AsyncOpenAI(
        base_url=f"{stack.proxy.base_url}/v1",
        api_key="berth-endpoint-token",
        http_client=endpoint_proxy_client(stack),
        max_retries=0,
    )
    async with sdk:
        completion: Final = await sdk.completions.create(model=MODEL, prompt="hi", max_tokens=8)
        assert completion.choices[0].text == "hello from A"

        stream: Final = await sdk.completions.create(model=MODEL, prompt="hi", max_tokens=8, stream=True)
        chunks: Final = [chunk async for chunk in stream]
        # LiteLLM re-chunks: the finish reason comes in a chunk of its own, with `text: null`.
        pieces: Final = [chunk.choices[0].text or "" for chunk in chunks if chunk.choices]
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert "".join(pieces) == "hello from A"
        assert len([piece for piece in pieces if piece]) == 3


async def test_wrong_key_through_the_sdk_raises_authentication_error(stack: Stack) -> None:
    sdk: Final = openai.AsyncOpenAI(
        base_url=f"{stack.proxy.base_url}/v1", api_key="sk-berth-stale", max_retries=0
    )
    async with sdk:
        with pytest.raises(openai.AuthenticationError, match="Invalid proxy server token"):
            await sdk.models.list()


async def use_policy(stack: Stack, name: str) -> str:
    """Name `name` in the replica list and wait until LiteLLM's strategy says it applied it (once more);
    returns the last policy line of LiteLLM's log."""
    marker: Final = f"{MODEL} routes by {name}"

    async def log() -> str:
        return await asyncio.to_thread(stack.log_path.read_text, errors="replace")

    before: Final = (await log()).count(marker)
    stack.control.routing_policy = name

    async def applied() -> bool:
        return (await log()).count(marker) > before

    await wait_until(applied)  # callers always switch to another policy: it logs each change
    return [line for line in (await log()).splitlines() if f"{MODEL} routes by " in line][-1]


async def test_traffic_follows_the_pool(stack: Stack, client: httpx.AsyncClient) -> None:
    # Round robin: this is about following the pool; under least_queue a scrape taken while A was busy
    # may rightly send all of a short burst to B.
    await use_policy(stack, "round_robin")
    try:
        await _traffic_follows_the_pool(stack, client)
    finally:
        await use_policy(stack, "least_queue")


async def _traffic_follows_the_pool(stack: Stack, client: httpx.AsyncClient) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True))
    assert await served_by(client, stack.master_key, 4) == {"hello from A"}

    # A second replica joins: LiteLLM picks it up within a poll interval, and both take traffic.
    joined_in: Final = await serve(
        stack, client, ("a", stack.upstream_a, True), ("b", stack.upstream_b, True)
    )
    assert await listed_ids(client, stack.master_key) == [MODEL]  # still one model, however many replicas
    assert await served_by(client, stack.master_key, 16) == {"hello from A", "hello from B"}

    # The first one stops being ready: from then on no request reaches it.
    left_in: Final = await serve(stack, client, ("a", stack.upstream_a, False), ("b", stack.upstream_b, True))
    assert await served_by(client, stack.master_key, 8) == {"hello from B"}

    # The last one leaves the list: the model is gone, the documented answers come back.
    emptied_in: Final = await serve(stack, client)
    assert await listed_ids(client, stack.master_key) == []
    response: Final = await client.post("/v1/chat/completions", headers=bearer(stack.master_key), json=CHAT)
    assert response.status_code == 400
    assert "Invalid model name" in response.json()["error"]["message"]
    print(f"LiteLLM followed the pool in {joined_in:.2f} s, {left_in:.2f} s, {emptied_in:.2f} s")


async def test_request_counters_are_served_and_pushed(stack: Stack, client: httpx.AsyncClient) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True))
    before: Final = (await client.get("/berth/requests", headers=bearer(stack.master_key))).json()
    await served_by(client, stack.master_key, 3)
    after: Final = (await client.get("/berth/requests", headers=bearer(stack.master_key))).json()
    assert after["model"] == MODEL
    assert after["requests_total"] - before["requests_total"] == 3
    assert after["requests_last_60s"] >= 3
    assert after["copies"] == after["replicas"] == ["a"]  # `replicas`: the old name, for one release

    # With no replica, the requests are still counted: that is the demand that wakes a pool at zero.
    await serve(stack, client)
    await client.post("/v1/chat/completions", headers=bearer(stack.master_key), json=CHAT)
    idle: Final = (await client.get("/berth/requests", headers=bearer(stack.master_key))).json()
    assert idle["requests_without_replica_total"] - after["requests_without_replica_total"] == 1
    assert idle["copies"] == []

    async def pushed() -> bool:
        reports: Final = stack.control.rate_reports
        return bool(reports) and reports[-1]["requests_total"] >= idle["requests_total"]

    await wait_until(pushed)


def test_secrets_stay_out_of_command_line_config_and_logs(stack: Stack) -> None:
    # Run last in the module: by now every other test has sent its keys and assertions.
    config_path: Final = stack.proxy.launch.config_path
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    assert stack.master_key not in config_path.read_text()
    assert stack.master_key not in " ".join(stack.proxy.launch.argv)
    assert stack.master_key.encode() not in Path(f"/proc/{stack.proxy.pid}/cmdline").read_bytes()
    assert stack.master_key not in repr(stack.proxy.launch)

    deadline: Final = time.monotonic() + 10
    while "berth replica sync" not in stack.log_path.read_text(errors="replace"):  # the last lines reach it
        assert time.monotonic() < deadline, "LiteLLM's log never showed the sync hook's lines"
        time.sleep(0.05)
    log: Final = stack.log_path.read_text(errors="replace")
    assert "Uvicorn running" in log  # the right file, and it captured the process's output
    assert "berth replica sync" in log  # the hook's own lines reach LiteLLM's log
    assert stack.master_key not in log
    assert stack.master_key[len("sk-berth-") :] not in log
    assert stack.control.minted, "the assertions sent by the other tests"
    for token in stack.control.minted:
        assert token.split(".")[2] not in log  # a token's signature would be enough to replay it

    assert os.environ.get("LITELLM_MASTER_KEY") != stack.master_key  # not leaked into the test process


def connections_to(pid: int, port: int) -> int:
    """Established TCP connections the process holds to `port` on loopback (from /proc: its sockets' inodes)."""
    inodes: Final = set()
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(descriptor)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            # rem_address is HEX_IP:HEX_PORT; state 01 is ESTABLISHED; field 9 the inode.
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


async def test_log_shows_no_leaked_http_sessions(stack: Stack, client: httpx.AsyncClient) -> None:
    # With LiteLLM's default aiohttp transport (kept: httpx's costs ~3 ms of CPU a request), concurrent
    # /v1/completions calls each built a client whose ClientSession, and connection, nothing closed: the collector
    # reports them as "Unclosed client session" / "Unclosed connector". gateway/litellm_hooks/request_path.py
    # shares one client instead. Without it: 28 more connections after these 40 calls; with it: 7.
    await serve(stack, client, ("a", stack.upstream_a, True))
    upstream_port: Final = httpx.URL(stack.upstream_a.url).port or 80
    before: Final = connections_to(stack.proxy.pid, upstream_port)

    async def complete(stream: bool) -> None:
        body: Final = {"model": MODEL, "prompt": "hi", "max_tokens": 4, "stream": stream}
        async with client.stream("POST", "/v1/completions", json=body, headers=bearer(stack.master_key)) as answer:
            assert answer.status_code == 200
            await answer.aread()

    # Concurrent: sent one at a time, the calls had left nothing behind.
    for _ in range(5):
        await asyncio.gather(*(complete(stream) for stream in (False, True) * 4))
    assert connections_to(stack.proxy.pid, upstream_port) - before <= 8  # what one round's concurrency needs

    async def leak_reported() -> bool:
        return "Unclosed" in stack.log_path.read_text(errors="replace")

    # A leaked session is reported when the collector frees it, which the paced collection does within 50 ms.
    with pytest.raises(AssertionError, match="not within"):
        await wait_until(leak_reported, timeout_s=2.0)
    log: Final = stack.log_path.read_text(errors="replace")
    assert "Unclosed connector" not in log
    assert "Unclosed client session" not in log
    assert "Fatal Python error" not in log
    assert stack.proxy.returncode is None
    # The endpoint proxy in front admits and audits every request; LiteLLM's log keeps no line per request.
    assert "berth request path: access log off" in log
    assert '"POST /v1/completions HTTP/1.1" 200' not in log
    # On LiteLLM's CPython 3.11, collections happen between bytecodes (gateway/litellm_hooks/gc_pacing.py): a
    # collection inside a ContextVar.reset killed this process in CI with a segmentation fault.
    assert "berth gc: automatic collection off" in log


@pytest_asyncio.fixture(scope="module")
async def busy_engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Engine]:
    """A third replica that decodes one sequence at a time, slowly: a few direct requests queue it."""
    knobs: Final = {"BERTH_SIM_TOKENS_PER_SECOND": "5", "BERTH_SIM_MAX_NUM_SEQS": "1"}
    engine: Final = await start_engine("busy", tmp_path_factory.mktemp("busy") / "busy.log", knobs)
    try:
        yield engine
    finally:
        await engine.stop()


async def engine_metrics(engine: Engine) -> str:
    async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
        response: Final = await http.get(f"{engine.url}/metrics")
        response.raise_for_status()
        return response.text


def finished_requests(metrics_text: str) -> float:
    """The replica's own count of the requests it finished (vllm:request_success_total, every reason)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith("vllm:request_success_total{")
    )


async def test_least_queue_routes_around_a_queued_replica(
    stack: Stack, client: httpx.AsyncClient, busy_engine: Engine
) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True), ("busy", busy_engine, True))
    # Three requests straight to the busy replica, 10 s of decoding each: one runs, two wait.
    long_chat: Final = {**CHAT, "max_tokens": 50, "ignore_eos": True}
    async with httpx.AsyncClient(base_url=busy_engine.url, timeout=60, trust_env=False) as direct:
        load: Final = [asyncio.create_task(direct.post("/v1/chat/completions", json=long_chat)) for _ in range(3)]
        try:

            async def queued() -> bool:
                figures: Final = parse(await engine_metrics(busy_engine))
                return figures.get("running", 0) + figures.get("waiting", 0) >= 3

            await wait_until(queued)

            async def routing_read_the_queue() -> bool:
                response: Final = await client.get("/berth/requests", headers=bearer(stack.master_key))
                return bool(response.json()["queues"].get("busy", 0) >= 3)

            # Until LiteLLM's routing has scraped the queue (a starved process may miss a round or two);
            # the queued requests last ~30 s (50 tokens each at 5 tokens/s, one at a time).
            await wait_until(routing_read_the_queue, 5 * SCRAPE_INTERVAL_S)
            before: Final = finished_requests(await engine_metrics(stack.upstream_a))
            replies: Final = await answers(client, stack.master_key, 10)
            after: Final = finished_requests(await engine_metrics(stack.upstream_a))
        finally:
            for task in load:
                task.cancel()
            await asyncio.gather(*load, return_exceptions=True)
    # Sent one after the other, each finds A idle again: had A's in-flight count not been given back
    # when a call ended, it would have reached the busy queue's 3 and shared the load from then on.
    assert replies == ["hello from A"] * 10
    assert after - before == 10


async def test_a_session_stays_on_one_replica(stack: Stack, client: httpx.AsyncClient) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True), ("b", stack.upstream_b, True))
    replicas: Final = set()
    for session in ("chat-1", "chat-2", "chat-3"):
        served = await served_by(client, stack.master_key, 4, {"x-session-id": session})
        assert len(served) == 1, session
        replicas.update(served)
    # Rendezvous hashing of these names over replicas "a" and "b" is fixed: the sessions do not all
    # share one replica, so the header, not chance or load, kept each on its own.
    assert replicas == {"hello from A", "hello from B"}


async def test_the_replica_list_names_the_policy(stack: Stack, client: httpx.AsyncClient) -> None:
    await serve(stack, client, ("a", stack.upstream_a, True), ("b", stack.upstream_b, True))
    try:
        assert (await use_policy(stack, "round_robin")).endswith(f"{MODEL} routes by round_robin")
        # Round robin takes each replica in turn, one request after the other.
        replies: Final = await answers(client, stack.master_key, 6)
        assert set(replies) == {"hello from A", "hello from B"}
        assert all(replies[i] != replies[i + 1] for i in range(len(replies) - 1)), replies
    finally:
        assert (await use_policy(stack, "least_queue")).endswith(f"{MODEL} routes by least_queue")