"""Issue 29, finding 13 (first part): a malformed node heartbeat answered 500 (a missing `address`, a `port_start` or
`cpus` not a number), or was stored and broke the node listing later (a GPU without an index), though the Security
model promises a one-line refusal. The heartbeat is a typed contract (berth.contracts.NodeInventory): anything else
is a 422 in one line and nothing is stored. In process: the real API app on a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.security import Identity
from server.app import build_context, create_app

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)  # node agents hold the stack token
GOOD = {"address": "127.0.0.1", "engine": "simulator", "port_start": 30000, "cpus": 8, "memory_gb": 64.0,
        "gpus": [{"index": 0, "name": "Simulated GPU 80GB", "memory_gb": 80, "memory_free_gb": 80,
                  "uuid": "SIM-n0-0", "simulated": True}], "labels": {"zone": "a"}, "taints": [], "held": []}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {context.signing.api_token(ADMIN)}"}) as client:
        yield client


@pytest.mark.parametrize("inventory", [
    {},  # no address, no engine
    {**GOOD, "port_start": "thirty thousand"},
    {**GOOD, "cpus": "many"},
    {**GOOD, "memory_gb": "lots"},
    {**GOOD, "gpus": [{"name": "a GPU with no index", "memory_gb": 80}]},
    {**GOOD, "gpus": "four"},
    {**GOOD, "labels": ["zone=a"]},
    {**GOOD, "port_start": -1},
    {**GOOD, "address": "x" * 10_000},
    [GOOD],
])
async def test_a_malformed_heartbeat_is_refused_in_one_line_and_not_stored(api: httpx.AsyncClient,
                                                                           inventory: Any) -> None:
    response = await api.post("/v1/nodes/n-bad/heartbeat", json=inventory)
    assert response.status_code == 422, response.text[:300]
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and detail.startswith("The request is malformed at body")
    assert len(detail) < 300
    listed = await api.get("/v1/nodes")
    assert listed.status_code == 200 and [node["id"] for node in listed.json()] == []


async def test_a_well_formed_heartbeat_is_stored_as_sent(api: httpx.AsyncClient) -> None:
    extra_fact = {**GOOD, "gpus": [{**GOOD["gpus"][0], "ecc_errors": 0}], "gpu_source": "simulated",
                  "a_field_of_a_newer_agent": 1}
    response = await api.post("/v1/nodes/n0/heartbeat", json=extra_fact)
    assert response.status_code == 200, response.text
    [node] = (await api.get("/v1/nodes")).json()
    assert (node["id"], node["address"], node["cpus"], node["memory_gb"], node["labels"]) == (
        "n0", "127.0.0.1", 8, 64.0, {"zone": "a"})
    assert node["gpus"][0]["memory_gb"] == 80 and node["gpus"][0]["ecc_errors"] == 0
