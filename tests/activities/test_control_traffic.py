"""The control activities a rollout drives its traffic with (issue 17): `set_traffic` keeps the split on
the endpoint and `revision_health` reads back what the proxies reported, through the real API."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from temporalio.testing import ActivityEnvironment

from activities.control import ControlActivities
from berth.api_client import ApiClient
from berth.contracts import CopyOutcomes
from berth.security import Identity
from server.app import build_context, create_app
from server.store.tables import EndpointRow
from workflows.rollout_payloads import HealthInput, TrafficInput


async def test_set_traffic_and_revision_health(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # Temporal is not needed for these routes
    with context.store.session() as session:
        session.add(EndpointRow(id="ep-1", workflow_id="wf-1", service="vllm", scope="user", owner="admin",
                                org="default", created_at=time.time(), annotations={"pool": True}))
    context.store.upsert_replica("wf-1", "ep-1", "wf-1.copy-0", "http://10.0.0.1:8000", ready=True)
    token = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
    async with ApiClient("http://api", token, transport=httpx.ASGITransport(app=create_app(context))) as api:
        control, env = ControlActivities(api), ActivityEnvironment()
        await env.run(control.set_traffic, TrafficInput(endpoint_id="ep-1", weights={1: 100}))
        assert (await api.routes()).endpoints[0].traffic == {1: 100}
        await env.run(control.set_traffic, TrafficInput(endpoint_id="ep-1", weights=None))
        assert (await api.routes()).endpoints[0].traffic is None
        since = time.time() - 1
        await api.report_load("ep-1", 2, {"wf-1.copy-0": CopyOutcomes(requests=2, errors=1, ttft_sum_s=0.1,
                                                                       ttft_count=1)})
        health = await env.run(control.revision_health, HealthInput(endpoint_id="ep-1", revision=1, since=since))
    assert (health.requests, health.errors, health.error_rate, health.copies) == (2, 1, 0.5, 1)
    assert health.ttft_ms is not None and abs(health.ttft_ms - 100.0) < 1e-6
