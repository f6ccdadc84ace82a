"""Issue 12, item 8: the endpoint proxy's upstream pool keeps no socket its upstream closed. Through the
real endpoint proxy under uvicorn to a simulator copy: streams the client aborts mid-way close their
upstream connection at once (the copy stops generating for nobody), and pooled connections the upstream
closes while idle (uvicorn's 5 s keep-alive) are reaped, never left in CLOSE-WAIT."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import httpx
import psutil
import pytest

from berth.security import SigningKey
from simulator.testing import start_simulator
from tests.gateway.endpoint.test_broken_streams import _serve_proxy

STREAMS = 30
CHAT = {"model": "sim/model", "messages": [{"role": "user", "content": "hi"}]}
# At 40 tokens/s an 800-token stream lasts 20 s: a connection kept for the rest of it outlives this bound.
ABORT_CLOSES_WITHIN_S = 10.0
UPSTREAM_KEEP_ALIVE_S = 5.0  # uvicorn's default, under the simulator as under vLLM


@pytest.fixture
def key(tmp_path: os.PathLike[str]) -> SigningKey:
    return SigningKey.load_or_create(tmp_path)  # type: ignore[arg-type]


def _upstream_sockets(port: int) -> list[str]:
    """The states of this process's TCP connections to the upstream (the proxy runs in this process)."""
    return [c.status for c in psutil.Process(os.getpid()).connections(kind="tcp")
            if c.raddr and c.raddr.port == port]


async def _until(condition: Callable[[list[str]], bool], port: int, timeout_s: float, what: str) -> None:
    """Wait until `condition` holds of the upstream sockets' states (the event loop runs the proxy meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while not condition(states := _upstream_sockets(port)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s; sockets to the upstream: {states}")
        await asyncio.sleep(0.1)


async def _abort_after_three_events(client: httpx.AsyncClient, url: str) -> None:
    async with client.stream("POST", url, json={**CHAT, "stream": True, "max_tokens": 800}) as response:
        assert response.status_code == 200
        seen = 0
        async for line in response.aiter_lines():
            seen += line.startswith("data:")
            if seen == 3:
                return  # leaving the block closes the client's connection mid-stream


async def test_aborted_streams_and_idle_connections_closed_upstream_leave_no_close_wait(key: SigningKey) -> None:
    engine = await start_simulator("sim/model", env={"BERTH_SIM_TOKENS_PER_SECOND": "40"})
    try:
        async with _serve_proxy(engine.base_url, key) as url:
            limits = httpx.Limits(max_connections=STREAMS, max_keepalive_connections=0)
            async with httpx.AsyncClient(timeout=30, limits=limits) as client:
                await asyncio.gather(*(_abort_after_three_events(client, f"{url}/v1/chat/completions")
                                       for _ in range(STREAMS)))
                await _until(lambda states: set(states) <= {psutil.CONN_TIME_WAIT}, engine.port,
                             ABORT_CLOSES_WITHIN_S, "every aborted stream's upstream connection to close")
                # Complete replies leave their connections idle in the pool; the upstream closes them.
                replies = await asyncio.gather(*(client.post(f"{url}/v1/chat/completions",
                                                             json={**CHAT, "max_tokens": 2})
                                                 for _ in range(STREAMS)))
                assert {r.status_code for r in replies} == {200}
                assert psutil.CONN_ESTABLISHED in _upstream_sockets(engine.port)  # pooled, idle
                await _until(lambda states: not {psutil.CONN_ESTABLISHED, psutil.CONN_CLOSE_WAIT} & set(states),
                             engine.port, UPSTREAM_KEEP_ALIVE_S + 10,
                             "the idle connections the upstream closed to be reaped")
                # The pool still serves: a fresh connection replaces the reaped ones.
                again = await client.post(f"{url}/v1/chat/completions", json={**CHAT, "max_tokens": 2})
                assert again.status_code == 200
    finally:
        await engine.stop()
