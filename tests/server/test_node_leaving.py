"""A node agent's last heartbeat (`leaving`, sent as it shuts down) takes its node offline at once, through the
real app and store: no copy is placed on it while its ranks stop (`berth down` had waited 15 s for a copy
re-placed onto the node it was stopping), and its next heartbeat, after a restart, brings it back."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from berth.security import Identity
from server.app import build_context, create_app

pytestmark = pytest.mark.timeout(60)

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
INVENTORY = {"address": "127.0.0.1", "engine": "simulator", "port_start": 30000,
             "gpus": [{"index": i, "name": "Simulated GPU 80GB", "memory_gb": 80} for i in range(2)]}


async def test_a_leaving_heartbeat_takes_the_node_offline_until_the_next(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")
    headers = {"Authorization": f"Bearer {context.signing.api_token(ADMIN)}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers=headers) as api:
        async def beat(**extra: object) -> str:
            response = await api.post("/v1/nodes/node-1/heartbeat", json={**INVENTORY, **extra})
            assert response.status_code == 200, response.text
            return str(response.json()["state"])

        async def listed() -> str:
            return str((await api.get("/v1/nodes")).json()[0]["state"])

        assert await beat() == "ready" and await listed() == "ready"
        assert await beat(leaving=True) == "offline"
        assert await listed() == "offline"
        row = context.store.nodes()[0]
        assert not context.store.placements.node_ready(row)  # placement passes it by
        assert row.gpus and row.address == "127.0.0.1"  # what it has is kept for its return
        assert await beat() == "ready" and await listed() == "ready"
        refused = await api.post("/v1/nodes/node-1/heartbeat", json={**INVENTORY, "leaving": "soon"})
        assert refused.status_code == 422
