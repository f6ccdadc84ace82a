"""The process-kind registry is the one list of kinds: every room that acts per kind covers exactly the
registry's kinds, and the facts mean what the rooms rely on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from activities.launches import LAUNCHES
from berth.kinds import FRONTS, REGISTRY, SERVICE_ENTRIES, ProcessKind, facts
from catalog.definition import ServiceSpec
from gateway.endpoint.route_table import Route
from server.kind_checks import CHECKS

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("activities", "berth", "catalog", "cli", "control", "gateway", "node", "server", "stack", "workflows")


def test_every_front_kind_has_a_launch_and_nothing_else_does() -> None:
    assert set(LAUNCHES) == set(FRONTS)
    assert set(CHECKS) <= set(REGISTRY)


def test_the_facts_the_rooms_rely_on() -> None:
    assert facts(None).kind is ProcessKind.VLLM  # a row from before its kind was recorded
    assert [k for k, f in REGISTRY.items() if f.fronts_pool] == [ProcessKind.LITELLM]
    assert SERVICE_ENTRIES == {ProcessKind.GATEWAY, ProcessKind.OPENCODE}
    assert not facts("opencode").openai_compatible and facts("opencode").probe.unauthorized_is_live
    with pytest.raises(ValueError):
        facts("shell")


def test_a_service_entry_names_a_service_kind_only() -> None:
    assert ServiceSpec(kind=ProcessKind.GATEWAY).kind is ProcessKind.GATEWAY
    for kind in ("litellm", "vllm", "sh"):
        with pytest.raises(ValueError, match="a service entry runs one of gateway, opencode|Input should be"):
            ServiceSpec.model_validate({"kind": kind})


@pytest.mark.parametrize("service, closed", [("litellm", True), ("vllm", False), ("gateway", False),
                                             ("a-kind-from-a-newer-control-plane", True)])
def test_the_proxy_never_routes_around_a_front_it_does_not_know(service: str, closed: bool) -> None:
    from berth.scopes import Scope

    route = Route(id="ep-1", scope=Scope.USER, owner="ada", org="", groups=frozenset(), service_url=None,
                  replicas=["http://127.0.0.1:1"], service=service)
    assert route.fronts_pool is closed
    assert (route.target() is None) is closed


def test_no_room_compares_kind_strings() -> None:
    """The chains the registry replaced stay gone: `kind == "gateway"`, `service == "litellm"`, …"""
    names = "|".join(k.value for k in ProcessKind)
    chain = re.compile(rf"""(kind|service)\s*[!=]=\s*["']({names})["']""")
    found = [f"{path.relative_to(REPO)}:{n}" for room in PRODUCT for path in (REPO / room).rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if chain.search(line)]
    assert not found, found
