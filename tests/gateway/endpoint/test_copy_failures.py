"""lowest_failure through the endpoint proxy (issue 36): a copy that answers 5xx counts a failure on the proxy's own
record of it, and the policy sends the next requests to the copy that has not failed. The real proxy under uvicorn
in front of two loopback copies."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest

from berth.security import SigningKey, TokenVerifier
from gateway.endpoint.endpoint_proxy import EndpointProxy
from tests.gateway.pool_copies import Copy, PoolRoutes, serving

pytestmark = pytest.mark.timeout(60)


async def test_a_copy_answering_5xx_is_avoided_by_lowest_failure(tmp_path: Path) -> None:
    flaky, steady = await Copy("c1").start(), await Copy("c2").start()
    flaky.fails = True
    key = SigningKey.load_or_create(tmp_path)
    proxy = EndpointProxy(PoolRoutes([flaky, steady], policy="lowest_failure"),  # type: ignore[arg-type]
                          TokenVerifier.from_jwks(key.jwks()))
    await proxy.refresh()
    try:
        async with serving(proxy) as url, httpx.AsyncClient(timeout=30) as client:
            # Different prompts: their keys spread over the copies the policy finds equally good.
            statuses = Counter([(await client.post(f"{url}/endpoints/ep-1/v1/chat/completions",
                                                   json={"model": "m", "prompt": f"prompt {n}"})).status_code
                                for n in range(12)])
    finally:
        await proxy.upstream.aclose()
        await proxy.scraper.aclose()
        flaky.close()
        steady.close()
    # Until c1 fails, the prompts share both copies; once it has failed, no request goes there (a failure halves in
    # a minute: it still counts as one when rounded).
    assert statuses == {500: 1, 200: 11}, statuses
    record = {replica.copy_id: round(replica.failures.count) for replica in proxy.routes["ep-1"].pool}
    assert record == {"c1": 1, "c2": 0}
