"""Issue 31, item 10: an endpoint token revoked through the API is refused by the endpoint proxy within a
couple of seconds, though the proxy verifies tokens offline and had admitted (and cached) it. The real API
app on a real SQLite store, in process; the proxy under uvicorn on loopback with its background tasks (its
routes table refreshed each second from that API) in front of a loopback copy."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from berth.api_client import ApiClient
from berth.security import Identity, TokenVerifier
from gateway.endpoint.endpoint_proxy import EndpointProxy
from server.app import build_context, create_app
from server.store.tables import EndpointRow
from tests.gateway.pool_copies import Copy, serving

pytestmark = pytest.mark.timeout(60)
ALICE = Identity("alice", ("team",), "acme")
REFUSED_WITHIN_S = 3.0  # the proxy refreshes its routes table each second


async def test_a_revoked_token_is_refused_within_a_couple_of_seconds(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    context.store.ensure_user("alice", org="acme", groups=["team"])
    copy = await Copy("c1").start()
    with context.store.session() as s:
        s.add(EndpointRow(id="ep-1", workflow_id="wf-1", service="vllm", scope="group", owner="alice", org="acme",
                          groups=["team"], created_at=time.time(), annotations={"pool": True}))
    context.store.upsert_replica("wf-1", "ep-1", "wf-1.copy-0", copy.url, ready=True)
    app = httpx.ASGITransport(app=create_app(context))
    admin_token = context.signing.api_token(context.store.identity("admin"), 600)
    proxy = EndpointProxy(ApiClient("http://api", admin_token, transport=app),
                          TokenVerifier.from_jwks(context.signing.jwks()))
    api = httpx.AsyncClient(transport=app, base_url="http://api",
                            headers={"Authorization": f"Bearer {context.signing.api_token(ALICE, 600)}"})
    try:
        async with api, serving(proxy, lifespan="on") as url, httpx.AsyncClient(timeout=10) as client:
            async def ask(token: str) -> httpx.Response:
                return await client.post(f"{url}/endpoints/ep-1/v1/chat/completions", json={"model": "m"},
                                         headers={"Authorization": f"Bearer {token}"})

            minted = [(await api.post("/v1/endpoints/ep-1/tokens", json={"expiration": "1h"})).json()
                      for _ in range(2)]
            (revoked, kept) = minted
            for token in minted:  # both admitted, and so verified and cached by the proxy
                assert (await ask(token["token"])).status_code == 200
            answer = await api.delete(f"/v1/endpoints/ep-1/tokens/{revoked['id']}")
            assert answer.status_code == 200, answer.text
            revoked_at = time.monotonic()
            refused = await ask(revoked["token"])
            while refused.status_code == 200 and time.monotonic() - revoked_at < REFUSED_WITHIN_S:
                refused = await ask(revoked["token"])
            assert (refused.status_code, refused.text) == (401, "Unauthorized")  # as any invalid token
            assert (await ask(kept["token"])).status_code == 200  # the others stand
            seen = len(copy.seen)
            assert (await ask(revoked["token"])).status_code == 401 and len(copy.seen) == seen  # never forwarded
    finally:
        copy.close()
