"""A rollout's traffic through the API: a copy publishes its revision, the split is validated and kept on
the endpoint, the routes table and LiteLLM's copy list follow it, and the proxies' per-copy outcomes sum
to a revision's health."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from berth.contracts import CopyOutcomes
from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext
from server.store.tables import CopyOutcomeRow, EndpointRow, ReservationRow


@asynccontextmanager
async def _api(tmp_path: Path) -> AsyncIterator[tuple[ServerContext, httpx.AsyncClient]]:
    context = build_context(tmp_path, "127.0.0.1:1")  # Temporal is not needed for these routes
    with context.store.session() as session:
        session.add(EndpointRow(id="ep-1", workflow_id="wf-1", service="vllm", scope="user", owner="admin",
                                org="default", created_at=time.time(), annotations={"pool": True}))
        for copy_id in ("wf-1.copy-0", "wf-1.copy-1"):
            session.add(ReservationRow(copy_id=copy_id, workflow_id="wf-1", placement={}, created_at=time.time()))
    token = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
    transport = httpx.ASGITransport(app=create_app(context))
    async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        old = {"workflow_id": "wf-1", "endpoint_id": "ep-1", "copy_id": "wf-1.copy-0", "url": "http://10.0.0.1:8000"}
        assert (await api.put("/v1/internal/replicas/wf-1.copy-0", json=old)).status_code == 204  # revision 1
        new = {**old, "copy_id": "wf-1.copy-1", "url": "http://10.0.0.2:8000", "revision": 2}
        assert (await api.put("/v1/internal/replicas/wf-1.copy-1", json=new)).status_code == 204
        yield context, api


async def test_a_copy_publishes_its_revision_and_the_routes_table_carries_the_split(tmp_path: Path) -> None:
    async with _api(tmp_path) as (context, api):
        assert {r.copy_id: r.revision for r in context.store.replicas("ep-1")} == {"wf-1.copy-0": 1,
                                                                                  "wf-1.copy-1": 2}
        table = (await api.get("/v1/internal/routes")).json()["endpoints"][0]
        assert "traffic" not in table
        assert [(c["copy_id"], c["revision"]) for c in table["pool"]] == [("wf-1.copy-0", 1), ("wf-1.copy-1", 2)]
        assert (await api.put("/v1/internal/endpoints/ep-1/traffic",
                              json={"weights": {"1": 80, "2": 20}})).status_code == 204
        table = (await api.get("/v1/internal/routes")).json()["endpoints"][0]
        assert table["traffic"] == {"1": 80, "2": 20}
        assert (await api.put("/v1/internal/endpoints/ep-1/traffic", json={"weights": None})).status_code == 204
        assert "traffic" not in (await api.get("/v1/internal/routes")).json()["endpoints"][0]
        assert "traffic" not in (context.store.endpoint("ep-1").annotations or {})


async def test_an_invalid_split_is_refused_in_one_line(tmp_path: Path) -> None:
    async with _api(tmp_path) as (_context, api):
        for weights, says in [({"1": 80, "2": 30}, "sum to 100"), ({"0": 100}, "numbered from 1"),
                              ({"1": 150, "2": -50}, "0 to 100"), ({}, "1 to 8"),
                              ({str(r): 0 for r in range(1, 10)}, "1 to 8")]:
            answer = await api.put("/v1/internal/endpoints/ep-1/traffic", json={"weights": weights})
            assert answer.status_code == 400, (weights, answer.text)
            assert says in answer.text
        missing = await api.put("/v1/internal/endpoints/ep-x/traffic", json={"weights": {"1": 100}})
        assert missing.status_code == 404


async def test_litellm_lists_no_copy_of_a_revision_at_zero(tmp_path: Path) -> None:
    async with _api(tmp_path) as (_context, api):
        listed = (await api.get("/v1/internal/endpoints/ep-1/replicas")).json()
        assert [c["copy_id"] for c in listed["copies"]] == ["wf-1.copy-0", "wf-1.copy-1"]
        await api.put("/v1/internal/endpoints/ep-1/traffic", json={"weights": {"1": 100, "2": 0}})
        listed = (await api.get("/v1/internal/endpoints/ep-1/replicas")).json()
        assert [c["copy_id"] for c in listed["copies"]] == ["wf-1.copy-0"]


async def test_per_copy_outcomes_sum_to_a_revisions_health(tmp_path: Path) -> None:
    async with _api(tmp_path) as (context, api):
        since = time.time() - 1
        report = {"requests": 10, "copies": {
            "wf-1.copy-0": {"requests": 6, "errors": 0, "ttft_sum_s": 0.6, "ttft_count": 6},
            "wf-1.copy-1": {"requests": 4, "errors": 2, "ttft_sum_s": 0.4, "ttft_count": 2}}}
        for _ in range(2):
            assert (await api.post("/v1/internal/endpoints/ep-1/load", json=report)).status_code == 204
        new = (await api.get("/v1/internal/endpoints/ep-1/revision-health",
                             params={"revision": 2, "since": since})).json()
        assert new == {"revision": 2, "requests": 8, "errors": 4, "error_rate": 0.5, "ttft_ms": 200.0, "copies": 1}
        old = (await api.get("/v1/internal/endpoints/ep-1/revision-health",
                             params={"revision": 1, "since": since})).json()
        assert old["error_rate"] == 0.0 and old["copies"] == 1 and abs(old["ttft_ms"] - 100.0) < 1e-6
        later = (await api.get("/v1/internal/endpoints/ep-1/revision-health",
                               params={"revision": 2, "since": time.time() + 1})).json()
        assert later == {"revision": 2, "requests": 0, "errors": 0, "error_rate": 0.0, "ttft_ms": None,
                         "copies": 0}
        # Rows older than an hour are pruned at the next report.
        context.store.outcomes.add("ep-1", {"wf-1.copy-1": CopyOutcomes(requests=1)}, now=time.time() + 7200)
        with context.store.session() as s:
            assert s.query(CopyOutcomeRow).count() == 1
