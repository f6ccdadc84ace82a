"""The import contract of what runs inside LiteLLM's virtualenv (pyproject.toml, `litellm-hooks-venv`) names
every room of Berth it may not import: a module added to the ground floor, or a room added to the gateway, is
forbidden to the hooks until someone decides otherwise here."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# The ground floor's modules the hooks may import (each imports only the standard library and pydantic).
# berth.ports: a constant with no imports, which berth.settings re-exports. berth.client_config: the client's
# configuration read with the standard library only, which berth.settings validates. berth.routing_rules: the
# standard library only; the edge kit's routing (which the hooks use) applies its freshness rule. berth.sites: the
# standard library only; the contracts check a site word with it.
GROUND_FLOOR_ALLOWED = {"berth.contracts", "berth.settings", "berth.client_config", "berth.errors",
                        "berth.bounded_parse", "berth.ports", "berth.routing_rules", "berth.sites"}
GATEWAY_ALLOWED = {"gateway.edge", "gateway.litellm_hooks"}


def _contract() -> dict[str, object]:
    linter = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {"roots": linter["root_packages"],
            **next(c for c in linter["contracts"] if c["id"] == "litellm-hooks-venv")}


def _children(package: str) -> set[str]:
    folder = ROOT / package
    return {f"{package}.{path.stem}" for path in folder.iterdir()
            if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()}


def test_the_hooks_contract_forbids_every_other_room_of_berth() -> None:
    contract = _contract()
    forbidden = set(contract["forbidden_modules"])  # type: ignore[call-overload]
    assert contract["source_modules"] == ["gateway.litellm_hooks"]
    others = set(contract["roots"]) - {"berth", "gateway"}  # type: ignore[call-overload]
    assert others <= forbidden
    assert _children("berth") - GROUND_FLOOR_ALLOWED <= forbidden
    assert _children("gateway") - GATEWAY_ALLOWED <= forbidden
    assert not forbidden & (GROUND_FLOOR_ALLOWED | GATEWAY_ALLOWED)
