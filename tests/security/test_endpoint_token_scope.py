"""Issue 29, finding 13 (second part): an administrator could mint an endpoint token for another user's user-scoped
endpoint, which the endpoint proxy then refused (the proxy lets an administrator in only where the endpoint's scope
does, berth/scopes.py). Minting now asks what the proxy asks: outside the scope, a 403 in one line; every token
the API does mint is one the proxy admits. In process: the real API app on a real SQLite store, and the proxy's
own token reader."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from berth.scopes import in_scope
from berth.security import Identity, TokenVerifier
from gateway.endpoint.token_identity import TokenIdentities
from server.app import build_context, create_app
from server.store.tables import EndpointRow

ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team",), org="acme")
# endpoint → (scope, owner, org, groups), and whether the administrator may mint a token for it
ENDPOINTS = {"ep-user": ("user", "alice", "acme", ["team"], False),
             "ep-group": ("group", "alice", "acme", ["team"], False),
             "ep-org": ("organization", "alice", "acme", ["team"], False),
             "ep-public": ("public", "alice", "acme", ["team"], True),
             "ep-admins-own": ("user", "admin", "default", ["default"], True)}


async def test_a_token_is_minted_only_where_the_proxy_admits_its_holder(tmp_path: Path) -> None:
    context = build_context(tmp_path, "127.0.0.1:1")  # nothing here reaches Temporal
    context.store.ensure_user("alice", org="acme", groups=["team"])
    with context.store.session() as session:
        for endpoint_id, (scope, owner, org, groups, _) in ENDPOINTS.items():
            session.add(EndpointRow(id=endpoint_id, workflow_id=f"wf-{endpoint_id}", service="vllm", scope=scope,
                                    owner=owner, org=org, groups=groups, created_at=time.time(), annotations={}))
    tokens = TokenIdentities(TokenVerifier.from_jwks(context.signing.jwks()))  # what the endpoint proxy reads
    app = create_app(context)
    for who, may in ((ADMIN, {e: spec[4] for e, spec in ENDPOINTS.items()}),
                     (ALICE, {e: spec[1] == "alice" for e, spec in ENDPOINTS.items()})):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                     headers={"Authorization": f"Bearer {context.signing.api_token(who)}"}) as api:
            for endpoint_id, minted_here in may.items():
                if not minted_here and who is ALICE:
                    continue  # the administrator's own endpoint: outside alice's scope, refused as it always was
                response = await api.post(f"/v1/endpoints/{endpoint_id}/tokens", json={"expiration": "1h"})
                scope, owner, org, groups, _ = ENDPOINTS[endpoint_id]
                if not minted_here:
                    assert response.status_code == 403, (who.user, endpoint_id, response.text)
                    assert response.json()["detail"] == (
                        f"You are outside endpoint {endpoint_id}'s scope ({scope}, owner {owner}): the endpoint "
                        "proxy would refuse a token of yours, even an administrator's. Ask its owner to widen the "
                        "scope.")
                    continue
                assert response.status_code == 200, (who.user, endpoint_id, response.text)
                holder = tokens.identity(response.json()["token"], endpoint_id)
                assert holder.user == who.user and in_scope(scope, owner, org, groups, holder), endpoint_id
