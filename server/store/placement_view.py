"""PlacementView: this API process's inventory of the nodes for placement, re-reading only the nodes that changed.

Reading every node per reservation cost 29 ms a copy at 1,000 nodes, four fifths of it decoding their JSON
inventories (docs/performance.md, "Placement at scale"). So every transaction that takes the placement lock (a row
lock on PostgreSQL, the write lock on SQLite) draws a generation of its own from the lock's row as it takes it
(`take`), and stamps with it each node whose placement facts it changes (`changed`): a GPU taken or freed there, its
GPUs, taints, volumes, cached models, labels (its site and failure domain) or draining. A reservation, holding the
lock at generation G, knows every transaction before it drew G - 1 at most: a view at G - 1 is whole; a view at V
below that re-reads the nodes stamped above V (another process's reservation or release, a heartbeat that changed a
node), and nothing else. Liveness is no change: a heartbeat that only says "alive" moves `last_heartbeat`, takes no
lock, and the nodes offline now are read afresh for each reservation through that column's index (few, as a rule).

The allocations' unique (node, GPU) constraint stays the last word: a write that skipped `changed` fails a
reservation, it never lets two copies hold one GPU (tests/server/store/test_placement_view.py).
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from berth.sites import node_site
from server import scheduler
from server.gpu_health import SKIP_NONE, GpuHealthRule
from server.inventory import Inventory
from server.store import mig_view
from server.store.tables import AllocationRow, NodeRow, StoreLockRow

PLACEMENT_LOCK = StoreLockRow.name == "placement"
# Where a transaction keeps the generation it took with the placement lock (see `take`).
GENERATION = "placement_generation"
# The placement lock, taken by an UPDATE of its row that also draws the transaction's generation: every transaction
# that takes the lock has a generation of its own, and stamps with it the nodes it changes.
TAKE = (update(StoreLockRow).where(PLACEMENT_LOCK).values(generation=func.coalesce(StoreLockRow.generation, 0) + 1)
        .returning(StoreLockRow.generation).execution_options(synchronize_session=False))


def take(s: Session) -> int:
    """Take the placement lock (a row lock on PostgreSQL, the write lock on SQLite) for this transaction, once, and
    return its generation. A heartbeat takes it before it writes its node's row, as every placement does, or it
    and a reservation would each wait on the other's row."""
    if GENERATION not in s.info:
        s.info[GENERATION] = s.connection().execute(TAKE).scalar_one()
    return int(s.info[GENERATION])


def changed(s: Session, node_ids: Collection[str]) -> None:
    """Record that what placement reads of these nodes changed, so every API process's view re-reads them."""
    if node_ids:
        s.connection().execute(update(NodeRow).where(NodeRow.id.in_(node_ids)).values(generation=take(s))
                               .execution_options(synchronize_session=False))


def read_views(s: Session, ready: Callable[[float], bool], where: ColumnElement[bool] | None = None,
               health: GpuHealthRule = SKIP_NONE) -> list[scheduler.NodeView]:
    """The scheduler's snapshots of the nodes (all, or those `where` picks), read as plain columns: no ORM objects,
    since the first read of a view and capacity's read every node. `ready` judges a node's last heartbeat, `health`
    each GPU's last known readings."""
    held = select(AllocationRow.node_id, AllocationRow.gpu_index)
    columns = select(NodeRow.id, NodeRow.last_heartbeat, NodeRow.gpus, NodeRow.taints, NodeRow.volumes,
                     NodeRow.draining, NodeRow.models, NodeRow.labels)
    if where is not None:
        held = held.where(AllocationRow.node_id.in_(select(NodeRow.id).where(where)))
        columns = columns.where(where)
    busy: dict[str, set[int]] = {}
    for node_id, gpu_index in s.connection().execute(held):
        busy.setdefault(node_id, set()).add(gpu_index)
    slices = mig_view.slices_of(s, where)  # none on most clusters: one query that finds nothing
    views = []
    for node_id, last_heartbeat, gpus, taints, volumes, draining, models, labels in s.connection().execute(columns):
        site, failure_domain = node_site(labels)
        whole = tuple(scheduler.GpuView(int(g["index"]), float(g.get("memory_gb", 0)), str(g.get("name", "")),
                                        health.unhealthy(g)) for g in gpus)
        views.append(scheduler.NodeView(
            id=node_id, ready=ready(last_heartbeat),
            gpus=mig_view.sliced(whole, slices[node_id]) if node_id in slices else whole,
            busy_gpus=frozenset(busy.get(node_id, ())), taints=tuple(taints or ()),
            volumes=frozenset(volumes or ()), draining=bool(draining), models=frozenset(models or ()),
            site=site, failure_domain=failure_domain,
        ))
    return views


class PlacementView:
    """The inventory one API process places from; read and refreshed only under the placement lock."""

    def __init__(self, node_offline_after_s: float, health: GpuHealthRule = SKIP_NONE) -> None:
        self.node_offline_after_s = node_offline_after_s
        self.health = health
        self._inventory: Inventory | None = None
        self._generation = 0
        self.reads = 0  # nodes read from the store since this view began (the tests' witness of "only what changed")

    def forget(self) -> None:
        """Read every node again next time (a transaction that `took` GPUs did not commit)."""
        self._inventory = None

    def took(self, s: Session, ranks: list[tuple[str, list[int]]]) -> None:
        """This process's own reservation, written by the transaction `current` was read in: kept here rather than
        re-read (the transaction `forget`s the view if it fails)."""
        assert self._inventory is not None and self._generation == s.info[GENERATION]
        for node_id, gpus in ranks:
            node = self._inventory.get(node_id)
            assert node is not None
            self._inventory.put(replace(node, busy_gpus=node.busy_gpus | frozenset(gpus)))

    def devices(self, node_id: str, gpus: list[int]) -> tuple[str, ...]:
        """What CUDA_VISIBLE_DEVICES names a rank's `gpus` on `node_id` by: () where their indices do (no MIG slice
        among them), else each GPU's device name (a slice's `MIG-<UUID>`) or index, in order (issue 36)."""
        node = self._inventory.get(node_id) if self._inventory is not None else None
        named = {gpu.index: gpu.device for gpu in node.gpus if gpu.device} if node is not None else {}
        if not any(index in named for index in gpus):
            return ()
        return tuple(named.get(index) or str(index) for index in gpus)

    def current(self, s: Session, now: float) -> Inventory:
        """The inventory as this transaction sees the store, under the placement lock (`take`)."""
        generation = take(s)
        cutoff = now - self.node_offline_after_s
        offline = set(s.connection().scalars(select(NodeRow.id).where(NodeRow.last_heartbeat < cutoff)))

        def ready(last_heartbeat: float) -> bool:
            return last_heartbeat >= cutoff

        # Transactions before this one drew the generations up to generation - 1: a view at that holds them all.
        if self._inventory is None or generation - 1 < self._generation:  # first use, or a store begun again
            views = read_views(s, ready, health=self.health)
            self._inventory = Inventory(views)
            self.reads += len(views)
        elif generation - 1 != self._generation:
            for view in read_views(s, ready, NodeRow.generation > self._generation, self.health):
                self._inventory.put(view)
                self.reads += 1
        # What this transaction writes, it writes at `generation`: its own GPUs through `took`, nothing else here.
        self._generation = generation
        self._inventory.mark_offline(offline)
        return self._inventory
