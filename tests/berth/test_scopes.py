"""The one scope rule the control plane and the endpoint proxy both apply."""

from __future__ import annotations

import pytest

from berth.scopes import Scope, in_scope
from berth.security import Identity
from gateway.endpoint.route_table import Route
from server.access import in_scope as api_in_scope
from server.store.tables import EndpointRow

OWNER = Identity(user="ada", groups=("ml",), org="acme")
GROUPMATE = Identity(user="bob", groups=("ml", "ops"), org="other")
COLLEAGUE = Identity(user="cy", groups=("sales",), org="acme")
STRANGER = Identity(user="dee", groups=("sales",), org="other")
ADMIN = Identity(user="root", groups=(), org="other", admin=True)


@pytest.mark.parametrize(("scope", "admitted"), [
    (Scope.USER, {"ada"}),
    (Scope.GROUP, {"ada", "bob"}),
    (Scope.ORGANIZATION, {"ada", "cy"}),
    (Scope.PUBLIC, {"ada", "bob", "cy", "dee", "root"}),
])
def test_who_is_inside_each_scope(scope: Scope, admitted: set[str]) -> None:
    everyone = (OWNER, GROUPMATE, COLLEAGUE, STRANGER, ADMIN)
    # Administrators are not inside a scope by this rule: each caller of it says where they may pass.
    inside = {who.user for who in everyone if in_scope(scope.value, "ada", "acme", ["ml"], who)}
    assert inside == admitted


def test_the_proxy_and_the_api_apply_the_same_rule() -> None:
    for scope in Scope:
        endpoint = EndpointRow(id="ep-1", workflow_id="wf-1", service="vllm", scope=scope.value, owner="ada",
                               org="acme", groups=["ml"], created_at=0.0)
        route = Route(id="ep-1", scope=scope, owner="ada", org="acme", groups=frozenset({"ml"}),
                      service_url=None, replicas=[])
        for who in (OWNER, GROUPMATE, COLLEAGUE, STRANGER, ADMIN):
            assert route.admits(who) == api_in_scope(endpoint, who) == in_scope(scope, "ada", "acme", ["ml"], who)
