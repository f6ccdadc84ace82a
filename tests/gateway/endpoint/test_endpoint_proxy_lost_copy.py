"""A Proxy=true endpoint whose copy dies (the chaos soak's two avoidable failures): the endpoint proxy, in
process with its real upstream pool and a LiteLLM stand-in on loopback, holds requests while the pool's
only copy is being re-placed instead of passing LiteLLM's "no deployment" 400, and sends a completion
LiteLLM lost with the dying copy (its 500 "APIConnectionError") once more when the copies it routes to
have changed. An error the model answered is relayed as it came; a lost completion is replayed once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from berth.contracts import RoutesTable, WakeResult
from berth.security import SigningKey, TokenVerifier
from gateway.edge.upstream import UpstreamPool
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.gateway.endpoint.test_endpoint_proxy_identity import FakeApi
from tests.gateway.endpoint.test_endpoint_proxy_unavailable import _ask

pytestmark = pytest.mark.timeout(60)

LOST = (b'{"error":{"message":"litellm.APIConnectionError: Hosted_vllmException - Connection error.",'
        b'"type":null,"param":null,"code":"500"}}')
# httpx's ReadError on a reset connection has no text: LiteLLM's message then ends at the exception's name.
LOST_SILENTLY = (b'{"error":{"message":"litellm.InternalServerError: InternalServerError: Hosted_vllmException - '
                 b'\\n\\nLiteLLM: model group \'m\' failed with the error above. No fallback was attempted.",'
                 b'"type":null,"param":null,"code":"500"}}')
# aiohttp's words (LiteLLM's default transport): a copy already gone, and a body cut short.
LOST_REFUSED = (b'{"error":{"message":"litellm.InternalServerError: InternalServerError: Hosted_vllmException - '
                b'Cannot connect to host 127.0.0.1:9 ssl:default [Connect call failed (\'127.0.0.1\', 9)]",'
                b'"type":null,"param":null,"code":"500"}}')
LOST_CUT = (b'{"error":{"message":"litellm.InternalServerError: InternalServerError: Hosted_vllmException - '
            b'Response payload is not completed: <ContentLengthError: 400, message=\'Not enough data to satisfy '
            b'content length header.\'>","type":null,"param":null,"code":"500"}}')
MODEL_ERROR = b'{"error":{"message":"litellm.InternalServerError: the model raised","type":null,"code":"500"}}'


class PoolApi(FakeApi):
    """The routes of one LiteLLM-fronted pool whose copies a test changes; wake answers "not asleep"."""

    def __init__(self, litellm_url: str) -> None:
        super().__init__([])
        self.litellm_url = litellm_url
        self.copies: dict[str, bool] = {}  # copy id → ready
        # What LiteLLM reports routing to: "ready" (the ready copies), a lagging list, or None (not reported).
        self.routed: list[str] | None | str = "ready"
        self.wakes = 0

    async def routes(self) -> RoutesTable:
        ready = [c for c, is_ready in self.copies.items() if is_ready]
        pool = [{"copy_id": c, "url": f"http://127.0.0.1:9/{c}", "ready": r} for c, r in self.copies.items()]
        self.endpoints = [{"id": "ep-1", "scope": "public", "owner": "alice", "org": "acme", "groups": [],
                           "service": "litellm", "service_url": self.litellm_url, "replicas": [],
                           "wakeable": True, "pool": pool,
                           "litellm_routed": ready if self.routed == "ready" else self.routed}]
        return await super().routes()

    async def wake_endpoint(self, endpoint_id: str, reason: str) -> WakeResult:
        self.wakes += 1
        return WakeResult(endpoint_id=endpoint_id, workflow_id="wf-1", woken=False, phase="starting")


@pytest.fixture()
def verifier(tmp_path: Path) -> TokenVerifier:
    return TokenVerifier.from_jwks(SigningKey.load_or_create(tmp_path).jwks())


def _answer(status: int, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            .encode() + body)


async def _litellm(answers: Callable[[int], bytes]) -> tuple[asyncio.Server, list[int]]:
    """A LiteLLM stand-in: the n-th request (from 1) gets `answers(n)`."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        seen.append(len(seen) + 1)
        writer.write(answers(len(seen)))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, seen


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 — a state of the proxy, not an event it sets
            await asyncio.sleep(0.01)


async def _one_request(verifier: TokenVerifier, answers: Callable[[int, PoolApi], bytes],
                       ) -> tuple[int, bytes, list[int]]:
    """One completion through a proxy whose pool has one ready copy, c1; LiteLLM answers its n-th request (from 1)
    with `answers(n, api)`, which may change the pool the API reports."""
    api: PoolApi
    server, seen = await _litellm(lambda n: answers(n, api))
    api = PoolApi(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    api.copies = {"c1": True}
    status, _headers, body = await _ask(_proxy(api, verifier))
    server.close()
    return status, body, seen


def _proxy(api: PoolApi, verifier: TokenVerifier) -> EndpointProxy:
    proxy = EndpointProxy(api, verifier, upstream=UpstreamPool(connect_timeout_s=2))  # type: ignore[arg-type]
    proxy.hold_timeout_s = 20.0
    return proxy


def test_a_served_pool_whose_only_copy_is_gone_holds_until_the_replacement_is_ready(verifier: TokenVerifier) -> None:
    async def main() -> tuple[int, bytes, list[int], int]:
        server, seen = await _litellm(lambda n: _answer(200, b'{"ok":true}'))
        api = PoolApi(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        proxy = _proxy(api, verifier)
        api.copies = {"c1": True}
        await proxy.refresh()  # the proxy has seen the pool serving
        api.copies = {"c2": False}  # c1 died; its replacement is starting
        asking = asyncio.ensure_future(_ask(proxy))
        await _until(lambda: bool(proxy.holds.held.get("ep-1")))  # the hold is what is under test
        assert seen == [], "nothing may reach LiteLLM while it has no deployment"
        api.copies = {"c2": True}
        status, _headers, body = await asking
        server.close()
        return status, body, seen, api.wakes

    status, body, seen, _wakes = asyncio.run(main())
    assert status == 200 and json.loads(body) == {"ok": True} and seen == [1]


def test_a_pool_never_seen_serving_gets_litellms_own_answer(verifier: TokenVerifier) -> None:
    """The first start keeps the documented behaviour: LiteLLM answers while copies are starting."""
    async def main() -> tuple[int, list[int]]:
        server, seen = await _litellm(lambda n: _answer(400, b'{"error":{"message":"Invalid model name"}}'))
        api = PoolApi(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        api.copies = {"c1": False}
        status, _headers, _body = await _ask(_proxy(api, verifier))
        server.close()
        return status, seen

    assert asyncio.run(main()) == (400, [1])


@pytest.mark.parametrize("lost", [LOST, LOST_SILENTLY, LOST_REFUSED, LOST_CUT],
                         ids=["connection-error", "no-text", "aiohttp-refused", "aiohttp-cut"])
def test_a_completion_lost_with_a_dying_copy_is_sent_again_once_the_copies_changed(verifier: TokenVerifier,
                                                                                 lost: bytes) -> None:
    def answers(n: int, api: PoolApi) -> bytes:
        if n == 1:
            api.copies = {"c2": True}  # c1 died with the request; c2 serves (the API learns it now)
            return _answer(500, lost)
        return _answer(200, b'{"ok":true}')

    status, body, seen = asyncio.run(_one_request(verifier, answers))
    assert status == 200 and json.loads(body) == {"ok": True} and seen == [1, 2]


REFUSED = _answer(500, b'{"error":{"message":"litellm.InternalServerError: InternalServerError: '
                       b'Hosted_vllmException - All connection attempts failed","code":"500"}}')


@pytest.mark.parametrize("litellm_reports", [True, False], ids=["routed-reported", "litellm-silent"])
def test_the_replay_waits_until_litellm_no_longer_routes_to_the_dead_copy(verifier: TokenVerifier,
                                                                        litellm_reports: bool) -> None:
    """The soak's case: LiteLLM still routes to the dead copy for a second after its 500 (its sync lags
    the pool), so a replay sent at once gets "All connection attempts failed" again. The replay waits until
    LiteLLM routes to exactly the ready copies — or, when LiteLLM has not reported what it routes to (the
    API restarted since), until the pool has had a few seconds to settle."""
    async def main() -> tuple[int, list[int]]:
        api: PoolApi
        dead_routed = True

        def answers(n: int) -> bytes:
            if n == 1:
                api.copies, api.routed = {"c2": False}, (["c1"] if litellm_reports else None)
                asyncio.get_running_loop().call_later(1.0, replaced)
                return _answer(500, LOST)
            return REFUSED if dead_routed else _answer(200, b'{"ok":true}')

        def replaced() -> None:
            nonlocal dead_routed
            dead_routed = False
            api.copies = {"c2": True}
            if litellm_reports:
                api.routed = "ready"  # LiteLLM routes to c2 now

        server, seen = await _litellm(answers)
        api = PoolApi(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        api.copies = {"c1": True}
        status, _headers, _body = await _ask(_proxy(api, verifier))
        server.close()
        return status, seen

    assert asyncio.run(main()) == (200, [1, 2])


def test_an_error_the_model_answered_is_relayed_as_it_came(verifier: TokenVerifier) -> None:
    assert asyncio.run(_one_request(verifier, lambda n, api: _answer(500, MODEL_ERROR))) == (500, MODEL_ERROR, [1])


def test_a_lost_completion_is_replayed_once_never_twice(verifier: TokenVerifier) -> None:
    """Every copy keeps dying under it (perhaps the request is what kills them): the second loss is
    relayed, and LiteLLM saw the request twice in all. The replay waits at most a few seconds for the
    copies to change when one stays routable."""
    assert asyncio.run(_one_request(verifier, lambda n, api: _answer(500, LOST))) == (500, LOST, [1, 2])


NO_DEPLOYMENT = (b'{"error":{"message":"/chat/completions: Invalid model name passed in model=m. Call `/v1/models` '
                 b'to view available models for your key.","type":"None","param":"None","code":"400"}}')


def test_litellms_no_deployment_as_the_only_copy_dies_is_sent_again_once_a_copy_serves(
        verifier: TokenVerifier) -> None:
    """ci43's flake: LiteLLM's sync hook dropped the dying copy a moment before this proxy's routing table did, so a
    request went in (the copy still routable here) and LiteLLM answered its "no deployment" 400. The pool lost the
    copy the request went in with: the request is sent again once LiteLLM routes to the re-placed copy."""
    def answers(n: int, api: PoolApi) -> bytes:
        if n == 1:
            api.copies = {"c2": False}  # c1 died: LiteLLM's hook dropped it; its replacement is starting
            asyncio.get_running_loop().call_later(1.0, api.copies.update, {"c2": True})
            return _answer(400, NO_DEPLOYMENT)
        return _answer(200, b'{"ok":true}')

    status, body, seen = asyncio.run(_one_request(verifier, answers))
    assert status == 200 and json.loads(body) == {"ok": True} and seen == [1, 2]


def test_a_model_the_endpoint_does_not_serve_gets_litellms_400_at_once(verifier: TokenVerifier) -> None:
    started = time.monotonic()
    assert asyncio.run(_one_request(verifier, lambda n, api: _answer(400, NO_DEPLOYMENT))) == (400, NO_DEPLOYMENT, [1])
    assert time.monotonic() - started < 2.0  # no wait for copies that are not changing
