"""NVML power into energy_optimized routing: the routes table sends each copy of an energy_optimized pool the watts
its GPUs drew at their nodes' last heartbeat (server/store/gpu_power.py), the proxy's route table keeps it on the
Replica, and energy_optimized weighs it where the copy's /metrics report no draw. In-process: the app over
httpx's ASGI transport, no server process, no Temporal."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.contracts import RouteEntry
from berth.security import Identity
from gateway.edge import routing
from gateway.edge.replica import Replica, ReplicaMetrics
from gateway.endpoint.route_table import build_route
from server.app import build_context, create_app
from server.store.tables import AllocationRow, EndpointRow

pytestmark = pytest.mark.timeout(60)
NOW = 1000.0


def _gpu(index: int, watts: float | None) -> dict[str, Any]:
    return {"index": index, "memory_gb": 80.0, "uuid": f"GPU-{index}", **({"power_w": watts} if watts else {})}


async def test_the_routes_table_carries_an_energy_pools_copies_power(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")
    store = context.store
    store.heartbeat_node("n-1", {"address": "10.0.0.1", "engine": "vllm",
                                 "gpus": [_gpu(0, 300.0), _gpu(1, 250.5), _gpu(2, None)]}, 30000)
    with store.session() as s:
        for endpoint_id, policy in (("ep-energy", "energy_optimized"), ("ep-queue", "least_queue")):
            s.add(EndpointRow(id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="vllm", scope="user",
                              owner="admin", org="default", created_at=time.time(),
                              annotations={"pool": True, "routing_policy": policy}))
        # Two GPUs with readings; one copy with a GPU never read (left out: it would look cheaper than it is);
        # a copy of the least_queue pool (not read at all).
        s.add_all([AllocationRow(node_id="n-1", gpu_index=0, copy_id="wf-ep-energy.copy-0"),
                   AllocationRow(node_id="n-1", gpu_index=1, copy_id="wf-ep-energy.copy-0"),
                   AllocationRow(node_id="n-1", gpu_index=2, copy_id="wf-ep-energy.copy-1")])
    for copy_id, endpoint_id in (("wf-ep-energy.copy-0", "ep-energy"), ("wf-ep-energy.copy-1", "ep-energy"),
                                 ("wf-ep-queue.copy-0", "ep-queue")):
        store.upsert_replica(f"wf-{endpoint_id}", endpoint_id, copy_id, f"http://{copy_id}:8000", ready=True)
    token = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        answer = await api.get("/v1/internal/routes")
    tables = {e["id"]: e for e in answer.json()["endpoints"]}
    assert {c["copy_id"]: c.get("power_w") for c in tables["ep-energy"]["pool"]} == {
        "wf-ep-energy.copy-0": 550.5, "wf-ep-energy.copy-1": None}
    assert all("power_w" not in c for c in tables["ep-queue"]["pool"])
    route = build_route(RouteEntry.model_validate(tables["ep-energy"]), None, {}, {})
    assert [(r.copy_id, r.node_power_w) for r in route.pool] == [("wf-ep-energy.copy-0", 550.5),
                                                                 ("wf-ep-energy.copy-1", None)]


def _copy(copy_id: str, scraped_w: float | None = None, node_w: float | None = None, kv: float = 0.0) -> Replica:
    return Replica(copy_id=copy_id, url=f"http://{copy_id}", node_power_w=node_w,
                   metrics=ReplicaMetrics(kv_cache_usage=kv, power_watts=scraped_w, scraped_at=NOW - 1))


def test_energy_optimized_weighs_the_nodes_reading_where_metrics_report_none() -> None:
    policy = routing.make("energy_optimized")
    # The NVML reading decides over cache pressure: the cooler copy, though its cache is fuller.
    pool = [_copy("hungry", node_w=700.0), _copy("frugal", node_w=200.0, kv=0.5)]
    assert routing.choose(policy, pool, NOW).copy_id == "frugal"  # type: ignore[union-attr]
    # The copy's own /metrics figure, where it has one, comes first (it is scraped every few seconds).
    pool = [_copy("hungry", scraped_w=650.0, node_w=100.0), _copy("frugal", node_w=300.0)]
    assert routing.choose(policy, pool, NOW).copy_id == "frugal"  # type: ignore[union-attr]
    # No reading at all counts as the most any candidate draws.
    pool = [_copy("unknown"), _copy("known", node_w=400.0, kv=0.3)]
    assert routing.choose(policy, pool, NOW).copy_id == "unknown"  # type: ignore[union-attr]
