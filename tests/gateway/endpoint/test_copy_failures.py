"""lowest_failure through the endpoint proxy (issue 36): a copy that answers 5xx counts a failure on the proxy's own
record of it, and the policy sends the next requests to the copy that has not failed; a copy that dies between its
answer's head and its body has that request retried on the other copy. The real proxy under uvicorn in front of two
loopback copies."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest

from berth.security import SigningKey, TokenVerifier
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.gateway.pool_copies import Copy, PoolRoutes, serving

pytestmark = pytest.mark.timeout(60)


async def _post_all(tmp_path: Path, copies: list[Copy], policy: str, count: int) -> tuple[list[httpx.Response],
                                                                                      EndpointProxy]:
    """`count` chat requests, one after another, through the real proxy in front of `copies`."""
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(PoolRoutes(copies, policy=policy),  # type: ignore[arg-type]
                          TokenVerifier.from_jwks(key.jwks()))
    await proxy.refresh()
    try:
        async with serving(proxy) as url, httpx.AsyncClient(timeout=30) as client:
            # Different prompts: their keys spread over the copies the policy finds equally good.
            answers = [await client.post(f"{url}/endpoints/ep-1/v1/chat/completions",
                                         json={"model": "m", "prompt": f"prompt {n}"}) for n in range(count)]
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        for copy in copies:
            copy.close()
    return answers, proxy


async def test_a_copy_answering_5xx_is_avoided_by_lowest_failure(tmp_path: Path) -> None:
    flaky, steady = await Copy("c1").start(), await Copy("c2").start()
    flaky.fails = True
    answers, proxy = await _post_all(tmp_path, [flaky, steady], "lowest_failure", 12)
    statuses = Counter(answer.status_code for answer in answers)
    # Until c1 fails, the prompts share both copies; once it has failed, no request goes there (a failure halves in
    # a minute: it still counts as one when rounded).
    assert statuses == {500: 1, 200: 11}, statuses
    record = {replica.copy_id: round(replica.failures.count) for replica in proxy.routes["ep-1"].pool}
    assert record == {"c1": 1, "c2": 0}


async def test_a_copy_dying_between_head_and_body_is_retried_on_the_other_copy(tmp_path: Path) -> None:
    """A hung copy killed by its node agent may have written its answer's head and not its body: the proxy holds a
    short non-streamed answer whole before relaying it, so the break is retried on the other copy, never cut in front
    of the client (a RemoteProtocolError in test_pool_healing)."""
    dying, steady = await Copy("c1").start(), await Copy("c2").start()
    dying.dies_midway = True
    answers, _proxy = await _post_all(tmp_path, [dying, steady], "round_robin", 4)
    assert [answer.status_code for answer in answers] == [200] * 4
    assert {answer.json()["copy"] for answer in answers} == {"c2"}
    assert dying.seen, "the dying copy was never asked"
