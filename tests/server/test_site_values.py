"""A workflow's site values (issue 36): a registered model's residency copied to the workflow (a contradicting
Residency refused in one line), the values' contradictions refused at render, the values reaching the copies'
reservations and the pool's routing facts, site values refused where Slurm places copies, and a node's site label
checked at its heartbeat. In process: no stack."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from berth.contracts import ModelRecord, NodeInventory, PoolFacts
from berth.contracts.model_registry import ModelScope
from berth.errors import UserInputError
from berth.security import Cipher
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from cli.components import site_labels
from server.routes.internal import _site
from server.site_values import refuse_sites_on_slurm, with_model_residency
from server.store.copy_sites import copy_sites
from server.store.database import Store
from server.submission import pool_facts
from workflows.payloads import CopyTimings, Owner, PoolInput
from workflows.placement import new_copy

pytestmark = pytest.mark.timeout(60)
ENTRY = "SmolLM2 135M Instruct"


def model(residency: str | None) -> ModelRecord:
    return ModelRecord(id="m1", name="smol", scope=ModelScope.USER, owner="u", owner_key="u",
                       source="hf://HuggingFaceTB/SmolLM2-135M-Instruct", residency=residency, created_at=0.0,
                       updated_at=0.0)


def test_a_models_residency_is_copied_to_its_workflow() -> None:
    entry = find_entry(ENTRY)
    assert with_model_residency(entry, {"Model": "x"}, model("eu")) == {"Model": "x", "Residency": "eu"}
    assert with_model_residency(entry, {"Residency": ""}, model("eu")) == {"Residency": "eu"}
    # A narrower residency (a site or region within it) stands; none on the model: the values as given.
    assert with_model_residency(entry, {"Residency": "eu-west"}, model("eu")) == {"Residency": "eu-west"}
    assert with_model_residency(entry, {"Residency": "us"}, model(None)) == {"Residency": "us"}
    assert with_model_residency(entry, {}, None) == {}
    # An entry with no Residency value (a gateway) is left alone.
    assert with_model_residency(find_entry("LiteLLM Model Gateway"), {}, model("eu")) == {}


def test_a_residency_that_contradicts_the_models_is_refused_in_one_line() -> None:
    with pytest.raises(UserInputError) as refused:
        with_model_residency(find_entry(ENTRY), {"Residency": "us-east"}, model("eu"))
    assert str(refused.value) == ("Residency=us-east contradicts model smol's residency eu: leave Residency empty, or "
                                  "name eu or a region within it (eu-…).")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("values", "refusal"), [
    ({"PreferredSite": "us-east", "AllowedSites": "eu-west,eu-north"},
     "PreferredSite=us-east is not among AllowedSites (eu-west,eu-north)"),
    ({"PreferredSite": "us-east", "Residency": "eu"}, "PreferredSite=us-east is outside Residency=eu"),
    ({"PreferredSite": "eu-west", "FailoverSites": "us-east", "Residency": "eu"},
     "FailoverSites=us-east is outside Residency=eu"),
    ({"FailoverSites": "eu-north"}, "FailoverSites is where requests spill from a saturated PreferredSite"),
    ({"PreferredSite": "eu-west", "FailoverSites": "eu-west"}, "FailoverSites names the PreferredSite eu-west"),
])
def test_site_values_that_could_never_be_honoured_are_refused(values: dict[str, str], refusal: str) -> None:
    entry = find_entry(ENTRY)
    with pytest.raises(UserInputError, match=re.escape(f"replica.sites: {refusal}")):
        render(entry, resolve_values(entry, values))


@pytest.mark.parametrize("value", ["eu west", "-eu", "a" * 65, "eu,,north", "eu/west"])
def test_a_site_value_that_is_no_site_word_is_refused(value: str) -> None:
    entry = find_entry(ENTRY)
    with pytest.raises(UserInputError):
        resolve_values(entry, {"AllowedSites": value})


def test_the_values_reach_the_copies_reservation_and_the_pools_routing_facts() -> None:
    entry = find_entry(ENTRY)
    definition = render(entry, resolve_values(entry, {
        "PreferredSite": "eu-west", "AllowedSites": "eu-west,eu-north", "Residency": "eu", "FailoverSites": "eu-north",
        "MaxCopiesPerSite": "2", "MinSites": "2", "MaxReplicas": "4", "RoutingPolicy": "site_local"}))
    pool = PoolInput.model_construct(workflow_id="wf", endpoint_id="ep", definition=definition, timings=CopyTimings(),
                                     owner=Owner(user="alice"))
    copy = new_copy(pool, "/models", 0, 1, None, "wf")
    assert copy.owner == "alice"  # whose uid its ranks run as (activities/rank_identities.py)
    sites = copy.sites
    assert sites is not None
    assert (sites.preferred, sites.allowed, sites.residency, sites.max_copies_per_site, sites.min_sites) == (
        "eu-west", ("eu-west", "eu-north"), "eu", 2, 2)
    facts = PoolFacts.from_annotations(pool_facts(definition).as_annotations())
    assert facts.sites is not None and facts.routing_policy == "site_local"
    assert (facts.sites.preferred, facts.sites.failover, facts.sites.residency) == ("eu-west", ("eu-north",), "eu")
    # What the routes table sends for a copy at each site.
    assert [_site(site, facts.sites) for site in ("eu-west", "eu-north", "us-east", None)] == [
        {"site": "eu-west", "site_rank": 0}, {"site": "eu-north", "site_rank": 1},
        {"site": "us-east", "site_rank": None}, {"site": None, "site_rank": None}]
    # A pool with no site value, a copy on a node with no site: nothing sent (the table reads as before).
    plain = render(entry, resolve_values(entry, {}))
    assert plain.replica is not None and plain.replica.sites is None
    assert "sites" not in pool_facts(plain).as_annotations()
    assert _site(None, None) == {} and _site("eu-west", None) == {"site": "eu-west", "site_rank": 0}


def test_site_values_are_refused_where_slurm_places_copies() -> None:
    entry = find_entry(ENTRY)
    with pytest.raises(UserInputError, match="apply where Berth's node agents place copies"):
        refuse_sites_on_slurm(render(entry, resolve_values(entry, {"Residency": "eu"})))
    refuse_sites_on_slurm(render(entry, resolve_values(entry, {})))


def test_a_nodes_site_label_is_checked_at_its_heartbeat_and_at_its_agents_start() -> None:
    base = {"address": "10.0.0.1", "engine": "simulator"}
    assert NodeInventory.model_validate({**base, "labels": {"berth.site": "eu-west", "team": "any thing"}})
    with pytest.raises(ValidationError, match="label berth.failure-domain='rack a' is not a site word"):
        NodeInventory.model_validate({**base, "labels": {"berth.failure-domain": "rack a"}})
    assert site_labels("eu-west", "rack-a") == {"berth.site": "eu-west", "berth.failure-domain": "rack-a"}
    assert site_labels(None, None) == {}


def test_a_copys_site_is_its_rank_0_nodes(tmp_path: Path) -> None:
    from berth.contracts import ReserveRequest

    store = Store(f"sqlite:///{tmp_path / 'berth.db'}", Cipher.load_or_create(tmp_path / "keys"))
    for index, (node, labels) in enumerate([("w1", {"berth.site": "eu-west"}), ("n0", {})]):
        store.heartbeat_node(node, {"address": "127.0.0.1", "engine": "simulator", "labels": labels,
                                    "gpus": [{"index": 0, "memory_gb": 80}]}, port_start=30000 + index * 100)
    for copy_id in ("wf.copy-0", "wf.copy-1"):
        store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=copy_id, nodes=1, gpus_per_node=1))
    nodes = {r.copy_id: r.placement["ranks"][0]["node_id"] for r in store.placements.reservations("wf")}
    sites = copy_sites(store.session, ["wf.copy-0", "wf.copy-1", "wf.gone"])
    assert sites == {copy_id: "eu-west" if nodes.get(copy_id) == "w1" else None
                     for copy_id in ("wf.copy-0", "wf.copy-1", "wf.gone")}
    assert "eu-west" in sites.values()
