"""The capacity figures as pure functions (server/capacity_figures.py): GPUs serving, reserved and free per node, per
GPU model and in total; available only on nodes that take copies; what draining and offline nodes hold; and each entry's
fit as the scheduler itself answers it. Also every catalog entry's demand with its default values
(server/capacity.py default_demand)."""

from __future__ import annotations

import pytest

from catalog.entry import load_catalog
from server.capacity import default_demand
from server.capacity_figures import EntryDemand, capacity, entry_fit
from server.scheduler import Demand, GpuView, NodeView, Policy

pytestmark = pytest.mark.timeout(60)
H100 = "NVIDIA H100 80GB HBM3"
L4 = "NVIDIA L4"


def node(node_id: str, gpus: int, memory_gb: float = 80, name: str = H100, busy: tuple[int, ...] = (),
         ready: bool = True, draining: bool = False, taints: tuple[str, ...] = ()) -> NodeView:
    return NodeView(id=node_id, ready=ready, gpus=tuple(GpuView(i, memory_gb, name) for i in range(gpus)),
                    busy_gpus=frozenset(busy), taints=taints, draining=draining)


# node-a: 4 H100, GPU 0 serves copy s, GPU 1 is reserved for copy r; node-b: draining, 2 H100, GPU 0 serves s2;
# node-c: offline, 2 H100, GPU 1 held by r2; node-d: tainted, 1 H100; node-e: 2 L4, free.
VIEWS = [node("node-e", 2, 24, L4), node("node-a", 4, busy=(0, 1)), node("node-b", 2, busy=(0,), draining=True),
         node("node-c", 2, busy=(1,), ready=False), node("node-d", 1, taints=("gpu=broken",))]
HOLDERS = {("node-a", 0): "wf-1.copy-0", ("node-a", 1): "wf-2.copy-0", ("node-b", 0): "wf-3.copy-0",
           ("node-c", 1): "wf-4.copy-0"}
SERVING = frozenset({"wf-1.copy-0", "wf-3.copy-0"})
MINE = {"wf-1.copy-0", "wf-4.copy-0"}


def label(copy_id: str) -> str:
    return copy_id if copy_id in MINE else "(another user)"


def figures(gpus: object) -> tuple[int, ...]:
    return tuple(getattr(gpus, name) for name in ("total", "serving", "reserved", "free", "available"))


def test_each_gpu_is_serving_reserved_or_free_and_available_only_where_copies_are_placed() -> None:
    answer = capacity(VIEWS, HOLDERS, SERVING, label, [])
    assert figures(answer.total) == (11, 2, 2, 7, 4)  # available: node-a's 2 free and node-e's 2; not b, c or d's
    total = answer.total
    assert (total.memory_gb, total.free_memory_gb, total.available_memory_gb) == (768.0, 448.0, 208.0)
    by_id = {n.id: n for n in answer.nodes}
    assert [n.id for n in answer.nodes] == ["node-a", "node-b", "node-c", "node-d", "node-e"]
    assert figures(by_id["node-a"].gpus) == (4, 1, 1, 2, 2)
    assert (by_id["node-b"].state, figures(by_id["node-b"].gpus)) == ("draining", (2, 1, 0, 1, 0))
    assert (by_id["node-c"].state, figures(by_id["node-c"].gpus)) == ("offline", (2, 0, 1, 1, 0))
    tainted = by_id["node-d"]
    assert (tainted.state, tainted.taints, tainted.gpus.available) == ("ready", ["gpu=broken"], 0)
    assert answer.node_states.model_dump() == {"ready": 3, "draining": 1, "offline": 1, "tainted": 1}


def test_what_a_node_holds_is_named_as_the_caller_may_see_it() -> None:
    by_id = {n.id: n for n in capacity(VIEWS, HOLDERS, SERVING, label, []).nodes}
    assert by_id["node-a"].copies == ["(another user)", "wf-1.copy-0"]
    assert by_id["node-b"].copies == ["(another user)"]
    assert by_id["node-c"].copies == ["wf-4.copy-0"]
    assert by_id["node-e"].copies == []


def test_gpu_models_are_grouped_by_name_and_size_largest_first() -> None:
    models = capacity(VIEWS, HOLDERS, SERVING, label, []).gpu_models
    assert [(m.name, m.memory_gb, m.nodes) for m in models] == [(H100, 80, 4), (L4, 24, 1)]
    assert figures(models[0].gpus) == (9, 2, 2, 5, 2) and figures(models[1].gpus) == (2, 0, 0, 2, 2)
    assert (models[1].gpus.memory_gb, models[1].gpus.available_memory_gb) == (48.0, 48.0)


def test_an_empty_cluster_has_no_figures_and_fits_nothing() -> None:
    answer = capacity([], {}, frozenset(), label, [])
    assert figures(answer.total) == (0, 0, 0, 0, 0) and answer.nodes == [] and answer.gpu_models == []
    fit = entry_fit(EntryDemand("Small", Demand(nodes=1, gpus_per_node=1)), [], 8, Policy.PACK)
    assert (fit.fits, fit.placeable, fit.most_available_on_a_node) == (False, False, 0)


def test_an_entry_that_fits_is_placed_where_the_scheduler_would_place_it() -> None:
    small = EntryDemand("Small", Demand(nodes=1, gpus_per_node=1, gpu_memory_gb=19.0))
    pack = entry_fit(small, VIEWS, 8, Policy.PACK)
    assert (pack.fits, pack.placement, pack.reason) == (True, ["node-a"], None)  # the busiest node with room
    assert pack.min_gpu_memory_gb == pytest.approx(21.1) and pack.most_available_on_a_node == 2
    assert entry_fit(small, VIEWS, 8, Policy.SPREAD).placement == ["node-a"]  # 2 available on a and on e: by id
    assert entry_fit(small, [*VIEWS, node("node-f", 8)], 8, Policy.SPREAD).placement == ["node-f"]


def test_an_entry_that_waits_says_what_it_needs_and_the_most_available_on_one_node() -> None:
    wide = EntryDemand("Wide", Demand(nodes=1, gpus_per_node=4, gpu_memory_gb=60.0))
    fit = entry_fit(wide, VIEWS, 8, Policy.PACK)
    assert (fit.fits, fit.placeable, fit.placement, fit.most_available_on_a_node) == (False, True, [], 2)
    assert fit.reason is not None and fit.reason.startswith("waiting for 1 node(s) with 4 free GPU(s)")
    assert "1 draining" in fit.reason and "1 offline" in fit.reason and "1 tainted" in fit.reason


def test_an_entry_no_waiting_would_place_says_so_in_the_schedulers_words() -> None:
    huge = EntryDemand("Huge", Demand(nodes=1, gpus_per_node=8, gpu_memory_gb=60.0), ("HfTokenSecret",))
    fit = entry_fit(huge, VIEWS, 8, Policy.PACK)
    assert (fit.fits, fit.placeable, fit.needs_values) == (False, False, ["HfTokenSecret"])
    assert fit.reason is not None and "the cluster has only 0 such node(s) of 5" in fit.reason
    spanning = entry_fit(EntryDemand("Span", Demand(nodes=3, gpus_per_node=1)), VIEWS, 2, Policy.PACK)
    assert not spanning.placeable and spanning.reason is not None and "at most 2 nodes" in spanning.reason


def test_every_catalog_entry_that_places_a_copy_has_a_demand_with_its_defaults() -> None:
    demands = {entry.name: default_demand(entry) for entry in load_catalog().values()}
    assert demands["LiteLLM Model Gateway"] is None and demands["OpenCode"] is None  # no model copy
    placed = {name: demand for name, demand in demands.items() if demand is not None}
    assert len(placed) == len(demands) - 2
    assert placed["vLLM"].needs_values == ("Model",)
    assert placed["Llama 4 Scout"].needs_values == ("HfTokenSecret",)
    assert placed["GPT-OSS 20B"].needs_values == ()
    assert (placed["Qwen3-Coder 30B"].demand.nodes, placed["Qwen3-Coder 30B"].demand.gpus_per_node) == (1, 2)
    assert placed["SmolLM2 135M Instruct"].demand.gpus_per_node == 0  # the CPU engine
