"""Issue 29, finding 5 (in part): after a Proxy=true endpoint's LiteLLM is killed, a request gets the
documented 503 (Retry-After 5, "being restarted") within the front's own hold bound
(`BERTH_PROXY_FRONT_HOLD_S`, set shorter here; by default as long as the wake's 120 s, since a request held
through a 20-45 s restart is served) — not the wake's bound and its "no replica became ready" answer. Both
ways a killed LiteLLM shows: its port refusing connections, and the routes table dropping its URL while the
pool's copies still serve. In process, with the proxy's real upstream pool on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from berth.processes import free_port
from berth.security import SigningKey, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.gateway.endpoint.test_endpoint_proxy_identity import FakeApi
from tests.gateway.endpoint.test_endpoint_proxy_unavailable import _ask

pytestmark = pytest.mark.timeout(60)
FRONT_HOLD_S = 1.0


class WakingApi(FakeApi):
    """The control plane as the proxy sees it: the pool is awake (its copies serve), nothing to wake."""

    async def wake_endpoint(self, endpoint_id: str, reason: str) -> Any:
        class Reply:
            woken = False
        return Reply()


def _proxy(endpoint: dict[str, Any], tmp_path: Path) -> EndpointProxy:
    verifier = TokenVerifier.from_jwks(SigningKey.load_or_create(tmp_path).jwks())
    proxy = EndpointProxy(WakingApi([endpoint]), verifier, upstream=UpstreamPool(connect_timeout_s=2))  # type: ignore[arg-type]
    assert proxy.hold_timeout_s == 120.0  # the wake's bound stays the documented default
    proxy.holds.front_hold_s = FRONT_HOLD_S
    return proxy


def _assert_front_restarting(status: int, headers: dict[bytes, bytes], body: bytes, took: float) -> None:
    assert status == 503 and headers[b"retry-after"] == b"5"
    assert "being restarted" in json.loads(body)["error"]["message"]
    assert FRONT_HOLD_S <= took < FRONT_HOLD_S + 3, took  # the front's bound, not the wake's


async def _timed(proxy: EndpointProxy) -> tuple[int, dict[bytes, bytes], bytes, float]:
    started = time.monotonic()
    status, headers, body = await _ask(proxy)
    return status, headers, body, time.monotonic() - started


async def test_a_litellm_port_refusing_connections_answers_503_within_the_front_bound(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # LiteLLM killed: nothing listens on its port
    endpoint = {"id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [],
                "service": "litellm", "service_url": closed, "replicas": []}
    _assert_front_restarting(*await _timed(_proxy(endpoint, tmp_path)))


async def test_a_pool_serving_without_its_litellm_answers_503_within_the_front_bound(tmp_path: Path) -> None:
    copy = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)  # a copy that serves (never reached)
    url = f"http://127.0.0.1:{copy.sockets[0].getsockname()[1]}"
    endpoint = {"id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [], "service": "litellm",
                "service_url": None, "replicas": [], "wakeable": True, "workflow_id": "wf-1",
                "pool": [{"copy_id": "ep-1.copy-0", "url": url, "ready": True}]}
    try:
        _assert_front_restarting(*await _timed(_proxy(endpoint, tmp_path)))
    finally:
        copy.close()
