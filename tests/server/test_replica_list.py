"""The copy list a pool's LiteLLM proxy follows: ready copies and the routing policy to pick among them."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from berth.security import Identity
from server.app import build_context, create_app
from server.store.tables import EndpointRow


async def test_lists_ready_copies_and_the_endpoints_routing_policy(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # Temporal is not needed for this route
    with context.store.session() as session:
        session.add(EndpointRow(id="ep-1", workflow_id="wf-1", service="litellm", scope="user", owner="admin",
                                org="default", created_at=time.time(),
                                annotations={"pool": True, "proxy": True, "routing_policy": "most_free_kv"}))
    context.store.upsert_replica("wf-1", "ep-1", "wf-1.copy-0", "http://10.0.0.1:8000/", ready=True)
    context.store.upsert_replica("wf-1", "ep-1", "wf-1.copy-1", "http://10.0.0.2:8000", ready=True, draining=True)
    token = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
    transport = httpx.ASGITransport(app=create_app(context))
    async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        listed = (await api.get("/v1/internal/endpoints/ep-1/replicas")).json()
        gone = (await api.get("/v1/internal/endpoints/ep-unknown/replicas")).json()
    keys = context.replica_keys
    # site_rank 0: no site rule and no site (issue 36's site_local ranks, the same for every copy here).
    copies = [{"copy_id": "wf-1.copy-0", "url": "http://10.0.0.1:8000/v1", "ready": True,
               "api_key": keys.for_copy("wf-1.copy-0"), "site_rank": 0},
              {"copy_id": "wf-1.copy-1", "url": "http://10.0.0.2:8000/v1", "ready": False,
               "api_key": keys.for_copy("wf-1.copy-1"), "site_rank": 0}]
    # `replicas` and a copy's `id`: the old names, still answered for one release (a running pool's hook reads them).
    assert listed == {"copies": [{**c, "id": c["copy_id"]} for c in copies], "routing_policy": "most_free_kv",
                      "replicas": [{**c, "id": c["copy_id"]} for c in copies]}
    assert keys.for_copy("wf-1.copy-0") != keys.for_copy("wf-1.copy-1")
    assert gone == {"copies": [], "routing_policy": "least_queue", "replicas": []}
