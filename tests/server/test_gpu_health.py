"""GPU health at the server (server/gpu_health.py): an unknown reading never clears a known one, the cluster's
`max_gpu_temp_c` / `reject_ecc` make placement skip hot and ECC-erroring GPUs — the scan, the index and the store's
reservations alike — and `explain placement` names them. No server process: the store on SQLite in a temp dir."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from berth.contracts import NodeInventory, ReserveRequest
from berth.security import Cipher
from berth.settings import ClusterSettings
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from server import scheduler
from server.capacity_figures import gpu_uses
from server.explain_placement import explain_unplaced
from server.gpu_health import SKIP_NONE, GpuHealthRule, keep_known
from server.inventory import Inventory
from server.placement_advice import Blocked, advice
from server.store.database import Store
from server.store.tables import NodeRow

pytestmark = pytest.mark.timeout(60)
RULE = GpuHealthRule(max_temp_c=90, reject_ecc=True)


def _gpu(index: int, **readings: Any) -> dict[str, Any]:
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "memory_gb": 80.0, "uuid": f"GPU-{index}", **readings}


def test_an_unknown_reading_keeps_the_last_known_one() -> None:
    stored = [_gpu(0, temperature_c=95, power_w=650.0, ecc_uncorrected=2), _gpu(1, temperature_c=40)]
    # Unknown: left out, None, or 0 °C / 0 W (a GPU without a working sensor).
    reported = [_gpu(0, temperature_c=0, power_w=None), _gpu(1)]
    kept = keep_known(stored, reported)
    assert [(g.get("temperature_c"), g.get("power_w"), g.get("ecc_uncorrected")) for g in kept] == [
        (95, 650.0, 2), (40, None, None)]


def test_a_known_reading_replaces_the_last_one_lower_ones_and_ecc_zero_included() -> None:
    stored = [_gpu(0, temperature_c=95, ecc_uncorrected=2)]
    kept = keep_known(stored, [_gpu(0, temperature_c=60, ecc_uncorrected=0)])  # cooled; a reset cleared the count
    assert kept[0]["temperature_c"] == 60 and kept[0]["ecc_uncorrected"] == 0


def test_a_replaced_gpu_does_not_inherit_the_old_ones_readings() -> None:
    stored = [_gpu(0, temperature_c=95)]
    fresh = {**_gpu(0), "uuid": "GPU-new"}
    assert "temperature_c" not in keep_known(stored, [fresh])[0]
    no_uuid = [{"index": 0, "memory_gb": 80.0, "temperature_c": 93}]  # a GPU without a UUID: matched by index
    assert keep_known(no_uuid, [{"index": 0, "memory_gb": 80.0}])[0]["temperature_c"] == 93


def test_the_rule_names_why_and_the_settings_defaults() -> None:
    assert RULE.unhealthy(_gpu(0, temperature_c=91)) == "91 °C, over the cluster's max_gpu_temp_c (90 °C)"
    assert RULE.unhealthy(_gpu(0, temperature_c=90, ecc_uncorrected=0)) is None  # at the limit is not over it
    assert RULE.unhealthy(_gpu(0, ecc_uncorrected=3)) == "3 uncorrected ECC error(s) since its last reset (reject_ecc)"
    assert GpuHealthRule(max_temp_c=0, reject_ecc=False) == SKIP_NONE  # 0: no limit
    assert SKIP_NONE.unhealthy(_gpu(0, temperature_c=120, ecc_uncorrected=9)) is None
    assert GpuHealthRule.from_settings(ClusterSettings()) == RULE  # what an operator gets without setting anything


def test_the_settings_read_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_MAX_GPU_TEMP_C", "80")
    monkeypatch.setenv("BERTH_REJECT_ECC", "false")
    assert GpuHealthRule.from_settings(ClusterSettings.load(tmp_path)) == GpuHealthRule(80, False)


def test_the_contract_bounds_what_a_heartbeat_says() -> None:
    inventory = {"address": "10.0.0.1", "engine": "vllm",
                 "gpus": [_gpu(0, temperature_c=45, power_w=120.5, ecc_uncorrected=0)]}
    assert NodeInventory.model_validate(inventory).gpus[0].power_w == 120.5
    for wild in ({"temperature_c": 300}, {"power_w": -1}, {"ecc_uncorrected": -2}, {"ecc_uncorrected": 2**60},
                 {"memory_gb": 1e308}):  # summed by the capacity figures: would overflow to infinity (null in JSON)
        with pytest.raises(ValueError):
            NodeInventory.model_validate({**inventory, "gpus": [_gpu(0, **wild)]})


def _views() -> list[scheduler.NodeView]:
    """n-hot: GPU 1 at 95 °C; n-ecc: GPU 0 with ECC errors; n-ok: healthy, one GPU busy (packs first)."""
    def node(node_id: str, gpus: list[dict[str, Any]], busy: frozenset[int] = frozenset()) -> scheduler.NodeView:
        return scheduler.NodeView(id=node_id, ready=True, busy_gpus=busy, gpus=tuple(
            scheduler.GpuView(g["index"], g["memory_gb"], g["name"], RULE.unhealthy(g)) for g in gpus))
    return [node("n-hot", [_gpu(0, temperature_c=70), _gpu(1, temperature_c=95)]),
            node("n-ecc", [_gpu(0, ecc_uncorrected=1), _gpu(1)]),
            node("n-ok", [_gpu(0), _gpu(1), _gpu(2)], busy=frozenset({0}))]


def test_placement_skips_hot_and_ecc_gpus_scan_and_index_alike() -> None:
    views = _views()
    one = scheduler.Demand(nodes=3, gpus_per_node=1, gpu_memory_gb=40)
    for decision in (scheduler.place(one, views), Inventory(views).place(one)):
        assert sorted(decision.ranks) == [("n-ecc", [1]), ("n-hot", [0]), ("n-ok", [1])]
    two = scheduler.Demand(nodes=1, gpus_per_node=2, gpu_memory_gb=40)
    assert scheduler.place(two, views).ranks == Inventory(views).place(two).ranks == [("n-ok", [1, 2])]
    unhealthy_only = views[:2]  # two GPUs each, one of them skipped
    assert scheduler.place(two, unhealthy_only) == Inventory(unhealthy_only).place(two)
    assert scheduler.place(two, unhealthy_only).blocked_reason is not None
    # A hot GPU may cool and a reset clears ECC errors: the copy waits, it is not refused for ever.
    assert scheduler.rejection_reason(two, unhealthy_only, max_nodes_per_copy=8) is None


@pytest.mark.parametrize("seed", range(3))
def test_the_index_matches_the_scan_as_gpus_turn_hot_and_cool(seed: int) -> None:
    rng = random.Random(seed)

    def gpu(index: int) -> scheduler.GpuView:
        return scheduler.GpuView(index, rng.choice([40.0, 80.0]), unhealthy="hot" if rng.random() < 0.2 else None)
    views = {f"n{i:02d}": scheduler.NodeView(id=f"n{i:02d}", ready=True, gpus=tuple(gpu(g) for g in range(4)))
             for i in range(30)}
    inventory = Inventory(views.values())
    for _ in range(200):
        demand = scheduler.Demand(nodes=rng.choice([1, 2]), gpus_per_node=rng.choice([1, 2, 4]),
                                  gpu_memory_gb=rng.choice([0, 30, 60]))
        expected = scheduler.place(demand, list(views.values()))
        assert inventory.place(demand) == expected
        node = views[rng.choice(sorted(views))]
        changed = replace(node, gpus=tuple(replace(g, unhealthy=None if g.unhealthy else "hot") if rng.random() < 0.3
                                           else g for g in node.gpus), busy_gpus=frozenset())
        views[node.id] = changed
        inventory.put(changed)


def test_explain_names_the_skipped_gpus() -> None:
    views = _views()
    demand = scheduler.Demand(nodes=1, gpus_per_node=2, gpu_memory_gb=40)
    copy = explain_unplaced(None, demand, views, scheduler.Policy.PACK, 8, lambda never: [])
    by_node = {verdict.node: verdict for verdict in copy.nodes}
    assert by_node["n-ok"].outcome == "chosen"
    assert by_node["n-hot"].outcome == by_node["n-ecc"].outcome == "gpus_unhealthy"
    assert by_node["n-hot"].detail == ("1 of its 2 GPU(s) of ≥ 44 GB are healthy, the copy needs 2 on one node; "
                                       "skipped GPU 1: 95 °C, over the cluster's max_gpu_temp_c (90 °C)")
    assert "skipped GPU 0: 1 uncorrected ECC error(s)" in by_node["n-ecc"].detail
    waiting = explain_unplaced(None, demand, views[:2], scheduler.Policy.PACK, 8,
                               lambda never: advice(_blocked(demand, views[:2]), never))
    assert waiting.advice == [
        "n-hot would take it once its GPU 1 is healthy again (cooler than the cluster's max_gpu_temp_c; a GPU "
        "reset clears ECC errors)",
        "n-ecc would take it once its GPU 0 is healthy again (cooler than the cluster's max_gpu_temp_c; a GPU "
        "reset clears ECC errors)"]


def _blocked(demand: scheduler.Demand, views: list[scheduler.NodeView]) -> Blocked:
    entry = load_catalog()["Qwen3-Coder 30B"]
    replica = render(entry, resolve_values(entry, {})).replica
    assert replica is not None
    return Blocked(demand=demand, replica=replica, entry=None, views=views, policy=scheduler.Policy.PACK,
                   max_nodes_per_copy=8, holders={})


def test_a_skipped_gpu_is_free_but_not_available_in_the_capacity_figures() -> None:
    uses = gpu_uses(_views()[0], holders={}, serving=())
    assert [(use.gpu.index, use.use, use.available) for use in uses] == [(0, "free", True), (1, "free", False)]


def _store(tmp_path: Path, rule: GpuHealthRule = RULE) -> Store:
    return Store(f"sqlite:///{tmp_path / 'berth.db'}", Cipher.load_or_create(tmp_path / "keys"), gpu_health=rule)


def _beat(store: Store, *gpus: dict[str, Any]) -> None:
    store.heartbeat_node("n-1", {"address": "127.0.0.1", "engine": "vllm", "gpus": list(gpus)}, port_start=30000)


def _reserve(store: Store, copy: str) -> list[int] | None:
    result = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=f"wf.{copy}", nodes=1,
                                                     gpus_per_node=1, gpu_memory_gb=40))
    return None if result.placement is None else list(result.placement.ranks[0].gpus)


def test_the_store_keeps_the_known_reading_and_reserve_skips_the_gpu(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _beat(store, _gpu(0, temperature_c=95, power_w=600.0), _gpu(1, ecc_uncorrected=4))
    _beat(store, _gpu(0, power_w=610.0), _gpu(1))  # NVML could read neither GPU's temperature nor ECC this time
    node = store.node("n-1")
    assert node is not None and node.gpus[0]["temperature_c"] == 95 and node.gpus[0]["power_w"] == 610.0
    assert node.gpus[1]["ecc_uncorrected"] == 4
    assert _reserve(store, "copy-0") is None  # both GPUs skipped: it waits
    _beat(store, _gpu(0, temperature_c=61), _gpu(1))  # cooled down
    assert _reserve(store, "copy-1") == [0]
    assert [v.gpus[1].unhealthy for v in store.placements.node_views()] == [
        "4 uncorrected ECC error(s) since its last reset (reject_ecc)"]


def test_a_moving_reading_does_not_make_the_views_read_the_node_again(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _beat(store, _gpu(0, temperature_c=50, power_w=100.0, memory_free_gb=79.0))

    def generation() -> int | None:
        with store.session() as s:
            row = s.get(NodeRow, "n-1")
            assert row is not None
            return row.generation
    before = generation()
    _beat(store, _gpu(0, temperature_c=55, power_w=300.0, memory_free_gb=60.0))  # the same verdict: healthy
    assert generation() == before
    _beat(store, _gpu(0, temperature_c=92))  # the verdict changed: every API process's view reads the node again
    assert generation() != before


def test_without_the_rule_nothing_is_skipped(tmp_path: Path) -> None:
    store = _store(tmp_path, SKIP_NONE)
    _beat(store, _gpu(0, temperature_c=99, ecc_uncorrected=5))
    assert _reserve(store, "copy-0") == [0]
