"""Placement: filter and score (pure), blocked vs rejected, and atomic reservations under a race —
on the real store (SQLite, and a real PostgreSQL: `store_url`) and through the real API on loopback."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import uvicorn

from berth.contracts import ReserveRequest
from berth.processes import free_port
from berth.security import Cipher, Identity, SigningKey
from server.app import build_context, create_app
from server.scheduler import Demand, GpuView, NodeView, Policy, place, rejection_reason
from server.store.database import Store


def node(
    node_id: str, gpus: int = 4, memory_gb: float = 80, busy: set[int] | None = None, **kwargs: object
) -> NodeView:
    return NodeView(
        id=node_id,
        ready=kwargs.pop("ready", True),  # type: ignore[arg-type]
        gpus=tuple(GpuView(i, memory_gb) for i in range(gpus)),
        busy_gpus=frozenset(busy or set()),
        **kwargs,
    )  # type: ignore[arg-type]


# --- filter and score ----------------------------------------------------------------------------------
def test_fit_takes_distinct_nodes_and_the_first_free_gpus() -> None:
    decision = place(Demand(nodes=2, gpus_per_node=4), [node("a"), node("b"), node("c")])
    assert decision.blocked_reason is None
    assert decision.ranks == [("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3])]


def test_never_two_ranks_on_one_node() -> None:
    decision = place(Demand(nodes=2, gpus_per_node=1), [node("big", gpus=8)])
    assert decision.ranks == []
    assert decision.blocked_reason is not None and "1 available now" in decision.blocked_reason


def test_busy_gpus_and_memory_are_filtered() -> None:
    nodes = [node("a", busy={0, 1}), node("b", memory_gb=40), node("c", busy={3})]
    decision = place(Demand(nodes=1, gpus_per_node=3, gpu_memory_gb=60), nodes)
    assert decision.ranks == [("c", [0, 1, 2])]
    blocked = place(Demand(nodes=2, gpus_per_node=3, gpu_memory_gb=60), nodes)
    assert blocked.ranks == [] and blocked.blocked_reason is not None
    assert "≥ 67 GB" in blocked.blocked_reason and "2 busy" in blocked.blocked_reason


def test_offline_draining_and_tainted_nodes_take_no_copy() -> None:
    nodes = [node("a", ready=False), node("b", draining=True), node("c", taints=("gpu-broken",)), node("d")]
    assert place(Demand(nodes=1, gpus_per_node=4), nodes).ranks == [("d", [0, 1, 2, 3])]
    reason = place(Demand(nodes=2, gpus_per_node=4), nodes).blocked_reason
    assert reason == (
        "waiting for 2 node(s) with 4 free GPU(s) each; 1 available now (1 offline, 1 draining, 1 tainted)"
    )


def test_pack_spread_volume_and_deterministic_ties() -> None:
    nodes = [node("c"), node("b", busy={0, 1}), node("a"), node("d", busy={0})]
    assert place(Demand(nodes=1, gpus_per_node=1), nodes, Policy.PACK).ranks == [("b", [2])]
    assert place(Demand(nodes=1, gpus_per_node=1), nodes, Policy.SPREAD).ranks == [("a", [0])]  # a < c
    with_volume = [*nodes[:3], replace(nodes[3], volumes=frozenset({"models"}))]
    demand = Demand(nodes=2, gpus_per_node=1, prefer_volume="models")
    assert [r[0] for r in place(demand, with_volume, Policy.SPREAD).ranks] == ["d", "a"]
    assert place(demand, with_volume).ranks == place(demand, list(reversed(with_volume))).ranks
    with pytest.raises(ValueError, match="choose one of pack, spread"):
        Policy.make("random")


def test_a_node_whose_cache_holds_the_digest_comes_first() -> None:
    digest = "ab" * 32
    nodes = [node("c"), node("b", busy={0, 1}), node("a"), replace(node("d", busy={0}), models=frozenset({digest}))]
    demand = Demand(nodes=1, gpus_per_node=1, prefer_model=digest)
    assert place(demand, nodes, Policy.SPREAD).ranks == [("d", [1])]  # the cache hit beats spreading
    assert place(demand, nodes, Policy.PACK).ranks == [("d", [1])]
    other = Demand(nodes=1, gpus_per_node=1, prefer_model="cd" * 32)
    assert place(other, nodes, Policy.PACK).ranks == [("b", [2])]  # no node holds it: plain packing


def test_blocked_versus_rejected() -> None:
    nodes = [node("a", busy={0, 1, 2, 3}), node("b"), node("c")]
    three = Demand(nodes=3, gpus_per_node=4)
    assert rejection_reason(three, nodes, max_nodes_per_copy=8) is None  # waits for "a" to free up
    assert place(three, nodes).blocked_reason is not None
    four = Demand(nodes=4, gpus_per_node=4)
    reason = rejection_reason(four, nodes, max_nodes_per_copy=8)
    assert reason is not None and "only 3 such node(s) of 3" in reason
    limit = rejection_reason(Demand(nodes=3, gpus_per_node=1), nodes, max_nodes_per_copy=2)
    assert limit is not None and "at most 2 nodes" in limit
    memory = rejection_reason(Demand(nodes=1, gpus_per_node=1, gpu_memory_gb=90), nodes, 8)
    assert memory is not None and "≥ 100 GB" in memory


# --- atomic reservations ----------------------------------------------------------------------------------
def _store(tmp_path: Path, nodes: int, gpus: int, url: str | None = None) -> Store:
    store = Store(url or f"sqlite:///{tmp_path / 'berth.db'}", Cipher.load_or_create(tmp_path / "keys"))
    for index in range(nodes):
        store.heartbeat_node(f"n{index}", _inventory(gpus), port_start=30000 + index * 100)
    return store


def _inventory(gpus: int) -> dict[str, object]:
    return {
        "address": "127.0.0.1",
        "engine": "simulator",
        "gpus": [{"index": i, "name": "Simulated GPU 80GB", "memory_gb": 80} for i in range(gpus)],
    }


def _assert_no_double_booking(store: Store, expected: int) -> None:
    held = [(a.node_id, a.gpu_index) for a in store.placements.allocations()]
    assert len(held) == expected and len(set(held)) == expected
    ports = [(r["node_id"], r["port"]) for p in store.placements.reservations() for r in p.placement["ranks"]]
    assert len(ports) == len(set(ports))


def test_concurrent_reservations_never_share_a_gpu(tmp_path: Path, store_url: str) -> None:
    store = _store(tmp_path, nodes=3, gpus=2, url=store_url)  # 6 GPUs, 40 copies racing for them
    barrier = threading.Barrier(40)

    def reserve(index: int) -> bool:
        barrier.wait()
        request = ReserveRequest(workflow_id="wf", copy_id=f"wf.copy-{index}", nodes=1, gpus_per_node=1)
        return store.placements.reserve(request).placement is not None

    with ThreadPoolExecutor(40) as pool:
        placed = list(pool.map(reserve, range(40)))
    assert placed.count(True) == 6
    _assert_no_double_booking(store, 6)
    # Multi-node copies racing for what is left after two releases (on two nodes: which copies won, and
    # where, is the race's): one wins, the other waits.
    by_node: dict[str, list[str]] = {}
    for reservation in store.placements.reservations():
        by_node.setdefault(reservation.placement["ranks"][0]["node_id"], []).append(reservation.copy_id)
    released = [copies[0] for copies in sorted(by_node.values())[:2]]
    for copy_id in released:
        store.placements.release(copy_id)
    winners = [f"wf.copy-{i}" for i, ok in enumerate(placed) if ok and f"wf.copy-{i}" not in released]
    freed = Counter(r.placement["ranks"][0]["node_id"] for r in store.placements.reservations())
    assert sum(freed.values()) == 4
    barrier = threading.Barrier(8)

    def reserve_two(index: int) -> bool:
        barrier.wait()
        request = ReserveRequest(workflow_id="wf", copy_id=f"wf.multi-{index}", nodes=2, gpus_per_node=1)
        return store.placements.reserve(request).placement is not None

    with ThreadPoolExecutor(8) as pool:
        multi = list(pool.map(reserve_two, range(8)))
    assert multi.count(True) == 1
    _assert_no_double_booking(store, 6)
    # A retried reservation (lost reply) gets the same placement, not a second one.
    again = store.placements.reserve(ReserveRequest(workflow_id="wf", copy_id=winners[0], nodes=1, gpus_per_node=1))
    assert again.placement is not None
    _assert_no_double_booking(store, 6)


@pytest.fixture
def api(tmp_path: Path, store_url: str) -> Iterator[tuple[str, str]]:
    """The real control-plane API on a loopback port (Temporal is not needed for reservations)."""
    context = build_context(tmp_path, "127.0.0.1:1", store_url)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(context), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    token = SigningKey.load_or_create(tmp_path / "keys").api_token(
        Identity(user="admin", groups=("default",), org="default", admin=True)
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(url + "/healthz", timeout=1)
            break
        except httpx.HTTPError:
            threading.Event().wait(0.05)
    try:
        yield url, token
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_concurrent_reservations_through_the_api(api: tuple[str, str]) -> None:
    url, token = api
    headers = {"Authorization": f"Bearer {token}"}
    for index in range(2):
        inventory = {**_inventory(2), "port_start": 31000 + index * 100}
        httpx.post(f"{url}/v1/nodes/n{index}/heartbeat", json=inventory, headers=headers).raise_for_status()

    def reserve(index: int) -> bool:
        body = ReserveRequest(workflow_id="wf", copy_id=f"wf.copy-{index}", nodes=1, gpus_per_node=1)
        response = httpx.post(
            f"{url}/v1/internal/reservations", json=body.model_dump(mode="json"), headers=headers, timeout=30
        )
        response.raise_for_status()
        return response.json()["placement"] is not None

    with ThreadPoolExecutor(16) as pool:
        placed = list(pool.map(reserve, range(16)))
    assert placed.count(True) == 4
    nodes = httpx.get(f"{url}/v1/nodes", headers=headers).json()
    holders = [g["allocated_to"] for n in nodes for g in n["gpus"]]
    assert len(set(holders)) == 4 and None not in holders
    # Draining: the node keeps its copies, takes no new ones; undrain gives it back.
    httpx.post(f"{url}/v1/nodes/n0/drain", headers=headers).raise_for_status()
    listed = {n["id"]: n for n in httpx.get(f"{url}/v1/nodes", headers=headers).json()}
    assert listed["n0"]["state"] == "draining" and listed["n0"]["allocated"] == 2
    assert httpx.post(f"{url}/v1/nodes/nope/drain", headers=headers).status_code == 404
    httpx.post(f"{url}/v1/nodes/n0/undrain", headers=headers).raise_for_status()
    listed = {n["id"]: n for n in httpx.get(f"{url}/v1/nodes", headers=headers).json()}
    assert listed["n0"]["state"] == "ready"
