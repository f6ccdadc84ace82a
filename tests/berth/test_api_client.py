"""ApiClient sends the request models of berth.contracts as the same JSON bodies it sent as dict literals
before (a default the caller left out stays out), and returns each route's response model."""

from __future__ import annotations

import json
from typing import Any

import httpx

from berth.api_client import ApiClient
from berth.contracts import GroupView, UserView, WakeResult, WorkflowScaled

USER = {"name": "alice", "org": "acme", "groups": ["team-a"], "admin": False}
ANSWERS: dict[str, Any] = {
    "/v1/endpoints/ep-1/tokens": {"endpoint_id": "ep-1", "token": "t", "expires_at": 1.5},
    "/v1/secrets": {"ref": "secret://user/K", "type": "value", "scope": "user", "owner": "alice"},
    "/v1/internal/secrets/resolve": {"type": "value", "value": "sk-1"},
    "/v1/endpoints/ep-1/wake": {"endpoint_id": "ep-1", "workflow_id": "wf-1", "woken": True, "phase": "scaled"},
    "/v1/workflows/wf-1/scale": {"id": "wf-1", "previous": 0, "desired": 2, "message": "scaling out"},
    "/v1/internal/users/alice/tokens": {"token": "t", "expires_at": 2.5},
    "/v1/users": USER,
    "/v1/groups": {"name": "team-b", "org": "acme"},
    "/v1/groups/team-b/members": USER,
    "/v1/users/alice/tokens": {"user": "alice", "token": "t", "id": "jti-1", "expires_at": 3.5},
}


async def test_request_bodies_are_the_json_they_were_and_answers_are_models() -> None:
    sent: list[tuple[str, Any]] = []

    def api(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, json.loads(request.content) if request.content else None))
        answer = ANSWERS.get(request.url.path)
        return httpx.Response(200, json=answer) if answer is not None else httpx.Response(204)

    async with ApiClient("http://api.test", "token", transport=httpx.MockTransport(api)) as client:
        token = await client.generate_token("ep-1", "1h")
        await client.create_secret("secret://user/K", "value", "sk-1")
        resolved = await client.resolve_secret("secret://user/K", "alice")
        await client.report_load("ep-1", 3)
        woken = await client.wake_endpoint("ep-1", "a request")
        scaled = await client.scale_workflow("wf-1", 2)
        owner = await client.owner_token("alice", None, 600)
        await client.note_token_lapse("ep-1", 4.5)
        user = await client.create_user("alice", "acme", ["team-a"], False)
        group = await client.create_group("team-b", "acme")
        member = await client.add_member("team-b", "alice")
        minted = await client.user_token("alice", "8h")
    assert sent == [
        ("/v1/endpoints/ep-1/tokens", {"expiration": "1h"}),
        ("/v1/secrets", {"ref": "secret://user/K", "type": "value", "value": "sk-1"}),
        ("/v1/internal/secrets/resolve", {"ref": "secret://user/K", "user": "alice"}),
        ("/v1/internal/endpoints/ep-1/load", {"requests": 3}),
        ("/v1/endpoints/ep-1/wake", {"reason": "a request"}),
        ("/v1/workflows/wf-1/scale", {"copies": 2, "replicas": 2}),  # `replicas`: the old name, for one release
        ("/v1/internal/users/alice/tokens", {"endpoint_id": None, "ttl_s": 600}),
        ("/v1/internal/endpoints/ep-1/token-lapse", {"expires_at": 4.5}),
        ("/v1/users", {"name": "alice", "org": "acme", "groups": ["team-a"], "admin": False}),
        ("/v1/groups", {"name": "team-b", "org": "acme"}),
        ("/v1/groups/team-b/members", {"user": "alice"}),
        ("/v1/users/alice/tokens", {"expiration": "8h"}),
    ]
    assert (token.token, resolved, owner, minted.id) == ("t", ("value", "sk-1"), ("t", 2.5), "jti-1")
    assert isinstance(woken, WakeResult) and woken.woken and isinstance(scaled, WorkflowScaled)
    assert isinstance(user, UserView) and user == member and isinstance(group, GroupView)
