"""The placement explanation's pure functions (server/explain_placement.py, server/placement_advice.py) on a
constructed cluster: nodes of different sizes, one drained, one tainted, one offline, one half busy. No server."""

from __future__ import annotations

import dataclasses

import pytest

from catalog.definition import ReplicaSpec
from catalog.entry import Entry, load_catalog
from catalog.render import render, resolve_values
from server import scheduler
from server.capacity import replica_demand
from server.explain_placement import explain_placed, explain_unplaced
from server.placement_advice import Blocked, advice

pytestmark = pytest.mark.timeout(60)
PACK = scheduler.Policy.PACK


def _node(node_id: str, count: int, gb: float, busy: tuple[int, ...] = (), **facts: object) -> scheduler.NodeView:
    gpus = tuple(scheduler.GpuView(index, gb) for index in range(count))
    return scheduler.NodeView(id=node_id, ready=bool(facts.pop("ready", True)), gpus=gpus, busy_gpus=frozenset(busy),
                              **facts)  # type: ignore[arg-type]


CLUSTER = [_node("n-big", 2, 80, busy=(0,)), _node("n-small", 4, 24), _node("n-drain", 2, 80, draining=True),
           _node("n-taint", 2, 80, taints=("gpu=broken",)), _node("n-off", 2, 80, ready=False),
           _node("n-48", 2, 48), _node("n-h200", 1, 141)]


def _coder() -> tuple[Entry, ReplicaSpec]:
    """Qwen3-Coder 30B with its defaults: 2 GPUs of ≥ 49 GB on one node."""
    entry = load_catalog()["Qwen3-Coder 30B"]
    replica = render(entry, resolve_values(entry, {})).replica
    assert replica is not None
    return entry, replica


def _blocked(views: list[scheduler.NodeView], entry: Entry | None = None) -> Blocked:
    found, replica = _coder()
    return Blocked(demand=replica_demand(replica), replica=replica, entry=entry or found, views=views, policy=PACK,
                   max_nodes_per_copy=8, holders={"n-big": ["wf-a.copy-0"]})


def test_each_node_reads_the_first_filter_that_turned_it_away() -> None:
    blocked = _blocked(CLUSTER)
    copy = explain_unplaced(None, blocked.demand, CLUSTER, PACK, 8, lambda never: advice(blocked, never))
    assert not copy.fits_now and copy.never_reason is None
    assert {node.node: node.outcome for node in copy.nodes} == {
        "n-off": "offline", "n-drain": "draining", "n-taint": "tainted", "n-48": "gpus_too_small",
        "n-h200": "gpus_too_small", "n-small": "gpus_too_small", "n-big": "busy"}
    assert [node.node for node in copy.nodes][:3] == ["n-off", "n-drain", "n-taint"]  # place's filter order
    # The scheduler's own line, which counts GPUs too small as busy as it always has.
    assert copy.blocked_reason == ("waiting for 1 node(s) with 2 free GPU(s) with ≥ 49 GB each; 0 available now "
                                   "(1 offline, 1 draining, 1 tainted, 4 busy)")
    busy = next(node for node in copy.nodes if node.node == "n-big")
    assert busy.detail == "1 of its 2 GPU(s) of ≥ 49 GB free now, the copy needs 2"


def test_a_blocked_copy_is_told_the_smallest_changes_that_would_place_it() -> None:
    blocked = _blocked(CLUSTER)
    assert advice(blocked, None) == [
        "GpusPerNode=1 (each GPU ≥ 99 GB) would place it now on n-h200",
        "MaxContextSize=236544 would place it now on n-48",
        "n-big would take it once 1 more of its GPUs free (held by wf-a.copy-0)",
        "n-drain would take it once an administrator undrains it (`berth node undrain n-drain`)"]


def test_each_change_advised_places_it_when_the_scheduler_is_asked() -> None:
    blocked = _blocked(CLUSTER)
    fewer = dataclasses.replace(blocked.demand, gpus_per_node=1, gpu_memory_gb=89.0)
    assert [node for node, _gpus in scheduler.place(fewer, CLUSTER, PACK).ranks] == ["n-h200"]
    freed = [dataclasses.replace(view, busy_gpus=frozenset()) for view in CLUSTER]
    assert [node for node, _gpus in scheduler.place(blocked.demand, freed, PACK).ranks] == ["n-big"]


def test_a_copy_no_waiting_would_place_gets_the_submissions_advice() -> None:
    small = [_node("n-small", 4, 24)]
    blocked = _blocked(small)
    copy = explain_unplaced("wf.copy-1", blocked.demand, small, PACK, 8, lambda never: advice(blocked, never))
    assert copy.never_reason is not None and copy.never_reason.startswith("the copy needs 1 distinct node(s)")
    assert len(copy.advice) == 1 and "needs" in copy.advice[0] and "\n" not in copy.advice[0]
    assert advice(dataclasses.replace(blocked, entry=None), copy.never_reason) == []


def test_a_placed_copy_shows_its_nodes_score_terms_judged_with_its_own_gpus_free() -> None:
    _entry, replica = _coder()
    demand = dataclasses.replace(replica_demand(replica), gpus_per_node=1, gpu_memory_gb=40.0,
                                 prefer_volume="models")
    views = [_node("n-big", 2, 80, busy=(0,)), _node("n-48", 2, 48, volumes=frozenset({"models"})),
             _node("n-drain", 2, 80, draining=True)]
    copy = explain_placed("wf.copy-0", [("n-big", [0])], demand, views, PACK)
    assert copy.placed and copy.fits_now and copy.advice == []
    chosen, lower, drained = copy.nodes
    assert (chosen.node, chosen.outcome, chosen.gpus, chosen.detail) == ("n-big", "chosen", [0], "rank 0, GPUs [0]")
    assert chosen.score is not None and (chosen.score.model_on_node, chosen.score.free_gpus) == (False, 2)
    # The cache hit is scored first: the scheduler would put it on n-48 now, and says so.
    assert lower.node == "n-48" and lower.outcome == "scored_lower"
    assert lower.score is not None and (lower.score.model_on_node, lower.score.order) == (True, 1)
    assert chosen.score.order == 2 and drained.outcome == "draining" and drained.score is None


def test_a_copy_that_fits_now_names_the_nodes_the_scheduler_would_choose() -> None:
    views = [_node("n-a", 2, 80), _node("n-b", 2, 80, busy=(1,))]
    blocked = _blocked(views)
    demand = dataclasses.replace(blocked.demand, gpus_per_node=1)
    copy = explain_unplaced(None, demand, views, PACK, 8, lambda never: pytest.fail("no advice for a fit"))
    assert copy.fits_now and [(n.node, n.outcome, n.gpus) for n in copy.nodes] == [
        ("n-b", "chosen", [0]), ("n-a", "scored_lower", [])]  # pack: the busier node first
