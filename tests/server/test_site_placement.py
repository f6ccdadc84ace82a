"""Sites and failure domains in placement (issue 36; server/site_placement.py, server/scheduler.py): on a constructed
cluster of two sites and three failure domains — eu-west (rack-a: w1, w2; rack-b: w3), us-east (rack-c: e1, e2)
and one node that reports no site (n0) — residency and AllowedSites exclude the right nodes, a pool's copies spread
across failure domains, MaxCopiesPerSite and MinSites hold, explain placement names the nodes each rule turned
away, and the indexed Inventory answers as the scan does. The last tests go through the store: sites reported in
heartbeats, the pool's copies read from its reservations."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from berth.contracts import ReserveRequest, SitePlacement
from berth.security import Cipher
from berth.sites import FAILURE_DOMAIN_LABEL, SITE_LABEL
from server import explain_placement, scheduler
from server.inventory import Inventory
from server.scheduler import Demand, GpuView, NodeView, Policy
from server.site_placement import site_demand
from server.store.database import Store

pytestmark = pytest.mark.timeout(60)

LAYOUT = {"w1": ("eu-west", "rack-a"), "w2": ("eu-west", "rack-a"), "w3": ("eu-west", "rack-b"),
          "e1": ("us-east", "rack-c"), "e2": ("us-east", "rack-c"), "n0": (None, None)}


def cluster(busy: dict[str, frozenset[int]] | None = None) -> list[NodeView]:
    gpus = tuple(GpuView(i, 80.0) for i in range(2))
    return [NodeView(id=node, ready=True, gpus=gpus, busy_gpus=(busy or {}).get(node, frozenset()), site=site,
                     failure_domain=domain) for node, (site, domain) in LAYOUT.items()]


def demand(rules: SitePlacement | None = None, copies: list[list[str]] | None = None) -> Demand:
    """One 1-GPU copy of a pool whose other copies sit on `copies` (node ids per copy)."""
    where = [[(node, *LAYOUT[node]) for node in nodes] for nodes in copies or []]
    return Demand(nodes=1, gpus_per_node=1, sites=site_demand(rules, where))


def eligible(d: Demand, views: list[NodeView] | None = None) -> set[str]:
    return {v.id for v in views or cluster() if scheduler.first_filter(v, d) is None}


def test_residency_and_allowed_sites_exclude_the_other_site_and_the_node_with_none() -> None:
    eu = demand(SitePlacement(residency="eu"))  # eu-west is within residency eu; us-east and no site are not
    assert eligible(eu) == {"w1", "w2", "w3"}
    assert {v.id: scheduler.first_filter(v, eu) for v in cluster() if v.id in ("e1", "n0")} == {
        "e1": "outside_sites", "n0": "outside_sites"}
    assert eligible(demand(SitePlacement(allowed=("us-east",)))) == {"e1", "e2"}
    assert eligible(demand(SitePlacement(allowed=("eu-west", "us-east"), residency="us"))) == {"e1", "e2"}
    # A residency is a site or a region named before a dash: `eu` is not within `europe`.
    assert eligible(demand(SitePlacement(residency="europe"))) == set()
    # No rule: every node, the one with no site included.
    assert eligible(Demand(nodes=1, gpus_per_node=1)) == set(LAYOUT)


def test_a_pool_with_no_rule_on_an_unlabelled_cluster_keeps_the_indexed_path() -> None:
    assert site_demand(None, [[("n0", None, None)]]) is None
    assert site_demand(None, []) is None
    assert site_demand(None, [[("w1", "eu-west", "rack-a")]]) is not None


def place_pool(copies: int, rules: SitePlacement | None = None, policy: Policy = Policy.PACK) -> list[str]:
    """Place `copies` one-GPU copies of one pool one after another, as reservations do; the nodes chosen."""
    placed: list[list[str]] = []
    busy: dict[str, frozenset[int]] = {}
    for _ in range(copies):
        decision = Inventory(cluster(busy)).place(demand(rules, placed), policy)
        assert decision.blocked_reason is None, decision.blocked_reason
        [(node, gpus)] = decision.ranks
        busy[node] = busy.get(node, frozenset()) | frozenset(gpus)
        placed.append([node])
    return [nodes[0] for nodes in placed]


def test_copies_spread_across_failure_domains_before_any_domain_takes_a_second() -> None:
    # Under pack, without domains, the second copy would take w1's other GPU.
    nodes = place_pool(3, SitePlacement(residency="eu"))
    assert [LAYOUT[node][1] for node in nodes][:2] == ["rack-a", "rack-b"]  # eu's two domains, one copy each
    nodes = place_pool(4)
    domains = [LAYOUT[node][1] or f"node:{node}" for node in nodes]
    assert len(set(domains[:4])) == 4  # rack-a, rack-b, rack-c, and n0 (no domain: a domain of its own)


def test_the_preferred_site_goes_first_then_the_spread() -> None:
    # us-east's one domain holds every copy while it has room: the preference outranks the spread. Then a domain
    # holding none of the pool's copies: n0 (a preference excludes nothing, so the node with no site may take one).
    assert place_pool(5, SitePlacement(preferred="us-east")) == ["e1", "e1", "e2", "e2", "n0"]


def test_max_copies_per_site_sends_the_rest_elsewhere_and_then_waits() -> None:
    rules = SitePlacement(preferred="us-east", allowed=("us-east", "eu-west"), max_copies_per_site=2)
    nodes = place_pool(4, rules)
    assert [LAYOUT[node][0] for node in nodes] == ["us-east", "us-east", "eu-west", "eu-west"]
    full = demand(rules, [[node] for node in nodes])
    decision = scheduler.place(full, cluster())
    assert decision.blocked_reason is not None and "in a site at MaxCopiesPerSite" in decision.blocked_reason
    assert eligible(full) == set()


def test_min_sites_puts_the_first_copies_in_distinct_sites() -> None:
    # Pack would put both first copies on one eu-west node; MinSites=2 sends the second to us-east.
    nodes = place_pool(3, SitePlacement(min_sites=2))
    assert {LAYOUT[nodes[0]][0], LAYOUT[nodes[1]][0]} == {"eu-west", "us-east"}
    # The first copy: a node with no site cannot count toward MinSites.
    assert scheduler.first_filter(cluster()[-1], demand(SitePlacement(min_sites=2))) == "site_taken"
    # Once two sites hold one, a site takes a second.
    assert eligible(demand(SitePlacement(min_sites=2), [["w1"], ["e1"]])) == set(LAYOUT)


def test_min_sites_above_the_allowed_sites_is_capped_at_them() -> None:
    rules = SitePlacement(allowed=("eu-west", "us-east"), min_sites=5)
    assert eligible(demand(rules, [["w1"], ["e1"]])) == {"w1", "w2", "w3", "e1", "e2"}
    assert eligible(demand(rules, [["w1"]])) == {"e1", "e2"}


def test_a_copy_that_can_never_fit_its_sites_is_rejected_at_once() -> None:
    reason = scheduler.rejection_reason(demand(SitePlacement(allowed=("ap-south",))), cluster(), 4)
    assert reason == ("the copy needs 1 distinct node(s) each with 1 GPU(s) with ≥ 0 GB at an allowed site, "
                      "but the cluster has only 0 such node(s) of 6")


@pytest.mark.parametrize("rules", [None, SitePlacement(residency="eu"), SitePlacement(preferred="us-east"),
                                   SitePlacement(min_sites=2, max_copies_per_site=1)])
def test_the_inventory_answers_as_the_scan(rules: SitePlacement | None) -> None:
    busy = {"w1": frozenset({0}), "e2": frozenset({0, 1})}
    for copies in ([], [["w3"]], [["w1"], ["e1"]]):
        d = demand(rules, copies)
        assert Inventory(cluster(busy)).place(d).ranks == scheduler.place(d, cluster(busy)).ranks


def test_explain_names_the_nodes_each_site_rule_turned_away() -> None:
    rules = SitePlacement(residency="eu", max_copies_per_site=1)
    views = cluster()
    held = {"wf.copy-0": [("w3", [0])]}
    d = explain_placement.with_pool_sites(Demand(nodes=1, gpus_per_node=1), rules, held, views, None)
    placement = explain_placement.explain_unplaced(None, d, views, Policy.PACK, 4, lambda never: [])
    outcomes = {verdict.node: (verdict.outcome, verdict.detail) for verdict in placement.nodes}
    assert outcomes["e1"] == ("outside_sites", "site us-east: outside Residency=eu")
    assert outcomes["n0"] == ("outside_sites", "no site (its agent reports no --site): outside Residency=eu")
    assert outcomes["w1"] == ("site_full", "site eu-west already holds 1 of the pool's copies (MaxCopiesPerSite=1)")
    assert placement.fits_now is False and "outside the allowed sites" in (placement.blocked_reason or "")
    # A placed copy is judged without itself: w3 holds it, and eu-west has room for exactly it.
    again = explain_placement.explain_placed(
        "wf.copy-0", held["wf.copy-0"],
        explain_placement.with_pool_sites(Demand(nodes=1, gpus_per_node=1), rules, held, views, "wf.copy-0"),
        views, Policy.PACK)
    chosen = next(verdict for verdict in again.nodes if verdict.outcome == "chosen")
    assert again.fits_now and chosen.node == "w3"
    assert chosen.score is not None and chosen.score.preferred_site is True
    taken = explain_placement.explain_unplaced(
        None, explain_placement.with_pool_sites(Demand(nodes=1, gpus_per_node=1), SitePlacement(min_sites=2),
                                                held, views, None), views, Policy.PACK, 4, lambda never: [])
    detail = {verdict.node: verdict.detail for verdict in taken.nodes if verdict.outcome == "site_taken"}
    assert detail["w1"] == ("site eu-west: MinSites=2 and only 1 site(s) hold a copy (eu-west): the next copy "
                            "goes to another site")


def heartbeat(store: Store, node: str, index: int) -> None:
    site, domain = LAYOUT[node]
    labels = {key: value for key, value in ((SITE_LABEL, site), (FAILURE_DOMAIN_LABEL, domain)) if value}
    store.heartbeat_node(node, {"address": "127.0.0.1", "engine": "simulator", "labels": labels,
                                "gpus": [{"index": i, "name": "Simulated GPU 80GB", "memory_gb": 80}
                                         for i in range(2)]}, port_start=30000 + index * 100)


def test_reservations_read_sites_from_heartbeats_and_the_pool_from_its_reservations(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'berth.db'}", Cipher.load_or_create(tmp_path / "keys"))
    for index, node in enumerate(LAYOUT):
        heartbeat(store, node, index)
    rules = SitePlacement(residency="eu")

    def reserve(copy_id: str, workflow: str = "wf", sites: SitePlacement | None = rules) -> str | None:
        result = store.placements.reserve(ReserveRequest(workflow_id=workflow, copy_id=copy_id, nodes=1,
                                                         gpus_per_node=1, sites=sites))
        return None if result.placement is None else result.placement.ranks[0].node_id

    first, second = reserve("wf.copy-0"), reserve("wf.copy-1")
    assert first is not None and second is not None
    assert {LAYOUT[first][1], LAYOUT[second][1]} == {"rack-a", "rack-b"}  # eu only, one copy per domain
    # Another pool is not this pool's: it packs as if wf were not there (no rule, so its first copy is unsited).
    assert reserve("other.copy-0", workflow="other", sites=None) is not None
    # A node's site moves with its heartbeat: w3 leaves eu for us-east, and eu's next copies go to rack-a.
    LAYOUT["w3"] = ("us-east", "rack-b")
    try:
        heartbeat(store, "w3", 2)
        assert LAYOUT[reserve("wf.copy-2") or ""][0] == "eu-west"
    finally:
        LAYOUT["w3"] = ("eu-west", "rack-b")


SITES = ("eu-west", "eu-north", "us-east", None)


def random_node(rng: random.Random, index: int) -> NodeView:
    gpus = tuple(GpuView(i, rng.choice((24.0, 80.0))) for i in range(rng.choice([1, 2, 4, 8])))
    site = rng.choice(SITES)
    return NodeView(id=f"r{index:03d}", ready=rng.random() > 0.1, gpus=gpus, site=site,
                    busy_gpus=frozenset(g.index for g in gpus if rng.random() < 0.3), draining=rng.random() < 0.05,
                    failure_domain=rng.choice([None, f"{site}-rack-1", f"{site}-rack-2"]) if site else None,
                    models=frozenset({"digest-a"}) if rng.random() < 0.1 else frozenset())


def random_demand(rng: random.Random, views: list[NodeView]) -> Demand:
    rules = rng.choice([None, SitePlacement(), SitePlacement(residency="eu"), SitePlacement(preferred="us-east"),
                        SitePlacement(allowed=("eu-west", "us-east"), max_copies_per_site=2),
                        SitePlacement(min_sites=3), SitePlacement(preferred="eu-north", min_sites=2)])
    copies = [[(node.id, node.site, node.failure_domain) for node in rng.sample(views, rng.choice([1, 1, 2]))]
              for _ in range(rng.choice([0, 1, 3, 8]))]
    sites = site_demand(rules, copies) or site_demand(SitePlacement(), copies)
    return Demand(nodes=rng.choice([1, 1, 2]), gpus_per_node=rng.choice([1, 2, 4]),
                  gpu_memory_gb=rng.choice([0, 30]), prefer_model=rng.choice([None, "digest-a"]), sites=sites)


@pytest.mark.parametrize("seed", range(4))
def test_the_inventorys_walk_answers_as_the_scan_on_random_clusters(seed: int) -> None:
    """Random clusters and pools, each decision taken and the cluster changed (a release, a node moving site)."""
    rng = random.Random(seed)
    inventory = Inventory(random_node(rng, i) for i in range(50))
    placed = waited = 0
    for _ in range(300):
        views = inventory.views()
        d, policy = random_demand(rng, views), rng.choice(list(Policy))
        decision = inventory.place(d, policy)
        assert decision == scheduler.place(d, views, policy)
        placed, waited = placed + (decision.blocked_reason is None), waited + (decision.blocked_reason is not None)
        for node_id, gpus in decision.ranks:
            node = inventory.get(node_id)
            assert node is not None
            inventory.put(replace(node, busy_gpus=node.busy_gpus | frozenset(gpus)))
        if rng.random() < 0.4:
            node = rng.choice(sorted(inventory.views(), key=lambda view: view.id))
            inventory.put(replace(node, busy_gpus=frozenset(), site=rng.choice(SITES)))
    assert placed > 20 and waited > 20, (placed, waited)
