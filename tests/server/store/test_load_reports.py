"""Load reports in the store (server/store/load_reports.py) and what the autoscaler makes of them: any API
replica's reports reach the one autoscaler, each counted once; the store keeps only the window; one
holder of the autoscaler's lease at a time; and placements by two stores (two API processes) on one
database never share a GPU — on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from berth.contracts import ReserveRequest
from berth.security import Cipher
from control.autoscale_loop import Meters
from server.store.database import Store
from server.store.load_reports import KEEP_S, AutoscalerLease
from server.store.tables import LoadReportRow
from tests.server.test_scheduler import _assert_no_double_booking, _inventory

pytestmark = pytest.mark.timeout(120)


def _two_stores(store_url: str, tmp_path: Path) -> tuple[Store, Store]:
    """Two stores on one database: what two API processes hold (each its own engine and locks)."""
    cipher = Cipher.load_or_create(tmp_path / "keys")
    return Store(store_url, cipher), Store(store_url, cipher)


def test_reports_from_either_replica_are_counted_once(store_url: str, tmp_path: Path) -> None:
    one, two = _two_stores(store_url, tmp_path)
    now = 1_000_000.0
    for second in range(10):
        (one if second % 2 else two).load.add_front_door("ep", 4, now + second)
    meters = Meters()
    meters.feed(one.load.window(now + 9.5), now + 9.5)
    meters.feed(two.load.window(now + 9.5), now + 9.5)  # the same rows again, read through the other
    assert meters.front_door.load("ep", now + 9.5).rate_rps == 4.0  # as FrontDoorRates counts them
    assert meters.front_door.load("ep", now + 15.0).idle_s == 6.0


def test_litellm_totals_posted_to_either_replica_make_one_rate(store_url: str, tmp_path: Path) -> None:
    one, two = _two_stores(store_url, tmp_path)
    meters = Meters()
    born = meters.litellm.created_at + 1  # a worker started after the autoscaler
    now = born + 100
    one.load.add_litellm("ep", 7, born, 20, ("c1",), now)
    two.load.add_litellm("ep", 7, born, 30, ("c1", "c2"), now + 1)  # +10
    one.load.add_litellm("ep", 7, born, 30, ("c2", "c1"), now + 2)  # nothing new
    meters.feed(two.load.window(now + 2), now + 2)
    assert meters.litellm.load("ep", now + 2).rate_rps == 3.0  # (20 + 10) / 10 s
    assert one.load.litellm_routed() == {"ep": ("c1", "c2")}  # the newest report's, sorted


def test_the_store_keeps_only_the_window(store_url: str, tmp_path: Path) -> None:
    store, _ = _two_stores(store_url, tmp_path)
    store.load.add_front_door("ep", 1, 1000.0)
    store.load.add_front_door("ep", 0, 1001.0)  # nothing admitted: nothing recorded
    store.load.add_front_door("other", 2, 1000.0 + KEEP_S + 1)  # prunes the first
    assert [(r.endpoint_id, r.requests) for r in store.load.window(1000.0 + KEEP_S + 1)] == [("other", 2)]
    with store.session() as s:
        assert s.query(LoadReportRow).count() == 1
    store.remove_endpoint("other")
    assert store.load.window(1000.0 + KEEP_S + 1) == []


def test_one_autoscaler_holds_the_lease_until_it_lapses(store_url: str, tmp_path: Path) -> None:
    one, two = _two_stores(store_url, tmp_path)
    assert one.load.hold_lease("worker-a", 5, now=100.0)
    assert not two.load.hold_lease("worker-b", 5, now=101.0)
    assert one.load.hold_lease("worker-a", 5, now=104.0)  # renewed until 109
    assert not two.load.hold_lease("worker-b", 5, now=108.0)
    assert two.load.hold_lease("worker-b", 5, now=109.5)  # worker-a stopped renewing
    assert not one.load.hold_lease("worker-a", 5, now=110.0)
    assert two.load.hold_lease("worker-b", 30)  # by the clock, as the route takes it
    follower = one.load.autoscaler_view(AutoscalerLease(holder="worker-c"))
    assert not follower.leader and follower.pools == [] and follower.reports == []


def test_racing_takers_of_the_lease_get_one_winner(store_url: str, tmp_path: Path) -> None:
    stores = _two_stores(store_url, tmp_path)
    barrier = threading.Barrier(8)

    def take(index: int) -> bool:
        barrier.wait()
        return stores[index % 2].load.hold_lease(f"worker-{index}", 30)

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(take, range(8))).count(True) == 1


def test_two_api_stores_never_place_two_copies_on_one_gpu(store_url: str, tmp_path: Path) -> None:
    stores = _two_stores(store_url, tmp_path)
    for index in range(3):
        stores[0].heartbeat_node(f"n{index}", _inventory(2), port_start=30000 + index * 100)
    barrier = threading.Barrier(24)

    def reserve(index: int) -> bool:
        barrier.wait()
        request = ReserveRequest(workflow_id="wf", copy_id=f"wf.copy-{index}", nodes=1, gpus_per_node=1)
        return stores[index % 2].placements.reserve(request).placement is not None

    with ThreadPoolExecutor(24) as pool:
        placed = list(pool.map(reserve, range(24)))
    assert placed.count(True) == 6
    _assert_no_double_booking(stores[1], 6)
