"""Issue 29, finding 6: `x-request-priority: high` is the policy's to grant, not the caller's. Without the
endpoint's (or the cluster's) `high_priority`, a high request is shed like a normal one and its answer says
so in `x-berth-priority`; with the grant, load shedding waits twice as long for it. Through the real endpoint
proxy under uvicorn, the real API and store in process, and a copy whose engine reports 10 waiting."""

from __future__ import annotations

from pathlib import Path

from tests.gateway.endpoint.test_endpoint_proxy_limits import BUSY, Copy, _error, _memory, _proxies


async def test_an_ungranted_high_runs_as_normal_and_says_so(tmp_path: Path) -> None:
    # 10 waiting; normal is shed above 8, high (granted) above 16.
    async with _proxies(tmp_path, [_memory({"shed_queue_depth": 8})], copy=Copy(metrics=BUSY)) as stack:
        token = stack.token()
        asked = await stack.chat(token, headers={"x-request-priority": "high"})
        assert asked.status_code == 429 and _error(asked)["code"] == "shed_queue_depth"
        assert asked.headers["x-berth-priority"] == "normal; high is not granted to this endpoint"
        assert "normal priority" in _error(asked)["message"]


async def test_a_granted_high_is_shed_later_and_carries_no_note(tmp_path: Path) -> None:
    policy = _memory({"shed_queue_depth": 8, "high_priority": True})
    async with _proxies(tmp_path, [policy], copy=Copy(metrics=BUSY)) as stack:
        token = stack.token()
        granted = await stack.chat(token, headers={"x-request-priority": "high"})
        assert granted.status_code == 200 and "x-berth-priority" not in granted.headers
        assert (await stack.chat(token)).status_code == 429  # normal is still shed


async def test_an_ungranted_high_that_is_served_says_so_too(tmp_path: Path) -> None:
    async with _proxies(tmp_path, [_memory({})]) as stack:
        answer = await stack.chat(stack.token(), headers={"x-request-priority": "high"})
        assert answer.status_code == 200
        assert answer.headers["x-berth-priority"].startswith("normal; high is not granted")
