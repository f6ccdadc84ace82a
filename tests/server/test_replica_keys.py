"""The copies' keys a gateway reads: those of the Proxy=false pools its owner may reach, with the token its
node mints for it (or an administrator's); never with a user's own token."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from berth.security import Identity
from server.app import build_context, create_app
from server.store.tables import EndpointRow

ALICE = Identity(user="alice", groups=("team-a",), org="acme")


async def test_a_gateway_reads_the_keys_of_the_copies_its_owner_may_reach(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # Temporal is not needed for these routes
    pools = {"ep-group": ("team-a", "group", False), "ep-other": ("team-b", "group", False),
             "ep-proxied": ("team-a", "group", True), "ep-public": ("team-z", "public", False)}
    with context.store.session() as session:
        for endpoint_id, (group, scope, proxy) in pools.items():
            session.add(EndpointRow(id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="vllm", scope=scope,
                                    owner="someone", org="acme", groups=[group], created_at=time.time(),
                                    annotations={"pool": True, "proxy": proxy}))
    for endpoint_id in pools:
        context.store.upsert_replica(f"wf-{endpoint_id}", endpoint_id, f"{endpoint_id}.copy-0", "http://h:1",
                                     ready=True)
    context.store.ensure_user("alice", org="acme", groups=["team-a"], admin=False)
    admin = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
    transport = httpx.ASGITransport(app=create_app(context))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        def bearer(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}"}
        minted = await api.post("/v1/internal/users/alice/replica-keys-token", headers=bearer(admin))
        as_gateway = (await api.get("/v1/internal/replica-keys", headers=bearer(minted.json()["token"]))).json()
        as_admin = (await api.get("/v1/internal/replica-keys", headers=bearer(admin))).json()
        alice = context.signing.api_token(ALICE)
        as_alice = await api.get("/v1/internal/replica-keys", headers=bearer(alice))
        alice_mints = await api.post("/v1/internal/users/alice/replica-keys-token", headers=bearer(alice))
        routes = await api.get("/v1/internal/routes", headers=bearer(alice))
    keys = context.replica_keys
    assert as_gateway == {"keys": {c: keys.for_copy(c) for c in ("ep-group.copy-0", "ep-public.copy-0")}}
    assert set(as_admin["keys"]) == {"ep-group.copy-0", "ep-other.copy-0", "ep-public.copy-0"}  # Proxy=true: none
    for refused in (as_alice, alice_mints, routes):
        assert refused.status_code == 403 and "sk-berth-replica-" not in refused.text
