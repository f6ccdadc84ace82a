"""The indexed inventory (server/inventory.py) decides exactly as the scheduler's scan over the same nodes, through
every change a cluster goes through: placements, releases, nodes going offline and back, draining, taints, new GPU
sizes, cached models."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from server import inventory as inventory_module
from server.inventory import Inventory
from server.scheduler import Demand, GpuView, NodeView, Policy, place

pytestmark = pytest.mark.timeout(60)

SIZES = (24.0, 40.0, 80.0)


def _node(rng: random.Random, index: int) -> NodeView:
    gpus = tuple(GpuView(i, rng.choice(SIZES)) for i in range(rng.choice([0, 1, 2, 4, 8])))
    busy = frozenset(g.index for g in gpus if rng.random() < 0.3)
    return NodeView(id=f"n{index:03d}", ready=rng.random() > 0.1, gpus=gpus, busy_gpus=busy,
                    taints=("gpu=broken",) if rng.random() < 0.05 else (), draining=rng.random() < 0.05,
                    volumes=frozenset({"vol-a"}) if rng.random() < 0.1 else frozenset(),
                    models=frozenset({"digest-a"}) if rng.random() < 0.1 else frozenset())


def _demand(rng: random.Random) -> Demand:
    return Demand(nodes=rng.choice([1, 1, 1, 2, 3]), gpus_per_node=rng.choice([0, 1, 1, 2, 4, 8]),
                  gpu_memory_gb=rng.choice([0, 10, 30, 60, 100]),
                  prefer_volume=rng.choice([None, "vol-a"]), prefer_model=rng.choice([None, None, "digest-a"]))


def _apply(views: dict[str, NodeView], inventory: Inventory, view: NodeView) -> None:
    views[view.id] = view
    inventory.put(view)


@pytest.mark.parametrize("seed", range(6))
def test_decisions_match_the_scan_through_a_cluster_changing(seed: int) -> None:
    rng = random.Random(seed)
    views = {v.id: v for v in (_node(rng, i) for i in range(60))}
    inventory = Inventory(views.values())
    outcomes = {True: 0, False: 0}
    for _ in range(400):
        demand, policy = _demand(rng), rng.choice(list(Policy))
        expected = place(demand, list(views.values()), policy)
        assert inventory.place(demand, policy) == expected
        outcomes[expected.blocked_reason is None] += 1
        for node_id, gpus in expected.ranks:  # the placement taken, as the store would
            view = views[node_id]
            _apply(views, inventory, replace(view, busy_gpus=view.busy_gpus | frozenset(gpus)))
        change = rng.random()
        node = views[rng.choice(sorted(views))]
        if change < 0.3:  # a release
            _apply(views, inventory, replace(node, busy_gpus=frozenset()))
        elif change < 0.4:
            _apply(views, inventory, replace(node, draining=not node.draining))
        elif change < 0.45:
            _apply(views, inventory, replace(node, taints=() if node.taints else ("t",)))
        elif change < 0.5:  # a new node, sometimes with a GPU size the cluster has not seen
            fresh = _node(rng, len(views))
            _apply(views, inventory, replace(fresh, gpus=(GpuView(0, rng.choice([48.0, 141.0])),) + fresh.gpus[1:]))
        elif change < 0.7:  # heartbeats stop here, resume there
            offline = {v.id for v in views.values() if not v.ready} ^ {node.id}
            for node_id in views:
                views[node_id] = replace(views[node_id], ready=node_id not in offline)
            inventory.mark_offline(offline)
        assert sorted(v.id for v in inventory.views()) == sorted(views)
    assert min(outcomes.values()) > 40, outcomes  # both placements and waits were compared


def test_blocked_reasons_count_every_filter() -> None:
    gpus = tuple(GpuView(i, 80.0) for i in range(2))
    nodes = [NodeView("a", ready=False, gpus=gpus), NodeView("b", ready=True, gpus=gpus, draining=True),
             NodeView("c", ready=True, gpus=gpus, taints=("x",)), NodeView("d", ready=True, gpus=gpus, busy_gpus={0}),
             NodeView("e", ready=True, gpus=(GpuView(0, 24.0), GpuView(1, 24.0)))]
    demand = Demand(nodes=1, gpus_per_node=2, gpu_memory_gb=30)
    decision = Inventory(nodes).place(demand)
    assert decision == place(demand, nodes)
    assert decision.blocked_reason is not None
    assert "0 available now (1 offline, 1 draining, 1 tainted, 2 busy)" in decision.blocked_reason
    too_big = Demand(nodes=1, gpus_per_node=1, gpu_memory_gb=200)
    assert Inventory(nodes).place(too_big) == place(too_big, nodes)


def test_a_cluster_of_many_gpu_sizes_is_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory_module, "MAX_MEMORY_SIZES", 3)
    nodes = [NodeView(f"n{i}", ready=True, gpus=(GpuView(0, 10.0 + i),)) for i in range(6)]
    inventory = Inventory(nodes)
    for memory in (0, 12, 14.5, 30):
        demand = Demand(nodes=1, gpus_per_node=1, gpu_memory_gb=memory, utilization=1.0)
        assert inventory.place(demand, Policy.SPREAD) == place(demand, nodes, Policy.SPREAD)
