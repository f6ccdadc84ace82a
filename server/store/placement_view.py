"""PlacementView: this API process's inventory of the nodes for placement, re-reading only the nodes that changed.

Reading every node per reservation cost 29 ms a copy at 1,000 nodes, four fifths of it decoding their JSON
inventories (docs/performance.md, "Placement at scale"). So each change placement depends on (a node's GPUs, taints,
volumes, cached models or draining; a GPU taken or freed on it) bumps the `placement` lock row's generation and
stamps the node with it (`changed`), under the placement lock: a row lock on PostgreSQL, the write lock on SQLite.
A reservation, under the same lock, compares that generation with its view's: equal, the view holds what every API
process has committed; above, it re-reads the nodes stamped above its own (another process's reservation or release,
a heartbeat that changed a node). Liveness is no change: a heartbeat moves only `last_heartbeat`, and the nodes
offline now are read afresh for each reservation through that column's index (few, as a rule).

The allocations' unique (node, GPU) constraint stays the last word: a write that forgot `changed` fails a
reservation, it never lets two copies hold one GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from server import scheduler
from server.inventory import Inventory
from server.store.tables import AllocationRow, NodeRow, StoreLockRow

PLACEMENT_LOCK = StoreLockRow.name == "placement"


# Where a placement transaction keeps the generation it read as it took the lock (server/store/placement.py).
GENERATION = "placement_generation"


def current_generation(s: Session) -> int:
    return s.connection().scalar(select(StoreLockRow.generation).where(PLACEMENT_LOCK)) or 0


def next_generation(s: Session) -> int:
    """Bump the placement generation and return it. Takes the placement lock row first (as every placement does)
    when the transaction does not hold it yet: a heartbeat must, before it writes its node's row, or it and a
    reservation would wait on each other's rows."""
    s.connection().execute(update(StoreLockRow).where(PLACEMENT_LOCK)
              .values(generation=func.coalesce(StoreLockRow.generation, 0) + 1)
              .execution_options(synchronize_session=False))
    return current_generation(s)


def changed(s: Session, node_ids: Collection[str], generation: int | None = None) -> int:
    """Record that what placement reads of these nodes changed, so every API process's view re-reads them; returns
    the new generation. `generation`: the current one, when this transaction read it under the placement lock."""
    if not node_ids:
        return current_generation(s) if generation is None else generation
    if generation is None:
        generation = next_generation(s)
    else:  # no one moves it while this transaction holds the lock: one statement fewer than next_generation
        generation += 1
        s.connection().execute(update(StoreLockRow).where(PLACEMENT_LOCK).values(generation=generation)
                  .execution_options(synchronize_session=False))
    s.connection().execute(update(NodeRow).where(NodeRow.id.in_(node_ids)).values(generation=generation)
              .execution_options(synchronize_session=False))
    return generation


def read_views(s: Session, ready: Callable[[float], bool],
               where: ColumnElement[bool] | None = None) -> list[scheduler.NodeView]:
    """The scheduler's snapshots of the nodes (all, or those `where` picks), read as plain columns: no ORM objects,
    since the first read of a view and capacity's read every node. `ready` judges a node's last heartbeat."""
    held = select(AllocationRow.node_id, AllocationRow.gpu_index)
    columns = select(NodeRow.id, NodeRow.last_heartbeat, NodeRow.gpus, NodeRow.taints, NodeRow.volumes,
                     NodeRow.draining, NodeRow.models)
    if where is not None:
        held = held.where(AllocationRow.node_id.in_(select(NodeRow.id).where(where)))
        columns = columns.where(where)
    busy: dict[str, set[int]] = {}
    for node_id, gpu_index in s.connection().execute(held):
        busy.setdefault(node_id, set()).add(gpu_index)
    views = []
    for node_id, last_heartbeat, gpus, taints, volumes, draining, models in s.connection().execute(columns):
        views.append(scheduler.NodeView(
            id=node_id, ready=ready(last_heartbeat),
            gpus=tuple(scheduler.GpuView(int(g["index"]), float(g.get("memory_gb", 0)), str(g.get("name", "")))
                       for g in gpus),
            busy_gpus=frozenset(busy.get(node_id, ())), taints=tuple(taints or ()),
            volumes=frozenset(volumes or ()), draining=bool(draining), models=frozenset(models or ()),
        ))
    return views


class PlacementView:
    """The inventory one API process places from; read and refreshed only under the placement lock."""

    def __init__(self, node_offline_after_s: float) -> None:
        self.node_offline_after_s = node_offline_after_s
        self._inventory: Inventory | None = None
        self._generation = 0
        self.reads = 0  # nodes read from the store since this view began (the tests' witness of "only what changed")

    @property
    def generation(self) -> int:
        return self._generation

    def forget(self) -> None:
        """Read every node again next time (a transaction that `took` GPUs did not commit)."""
        self._inventory = None

    def took(self, ranks: list[tuple[str, list[int]]], generation: int) -> None:
        """This process's own reservation, written at `generation` by a transaction that holds the placement lock
        and read the view current: kept here rather than re-read (the transaction `forget`s it if it fails)."""
        assert self._inventory is not None and generation == self._generation + 1
        for node_id, gpus in ranks:
            node = self._inventory.get(node_id)
            assert node is not None
            self._inventory.put(replace(node, busy_gpus=node.busy_gpus | frozenset(gpus)))
        self._generation = generation

    def current(self, s: Session, now: float) -> Inventory:
        """The inventory as this transaction sees the store; the caller holds the placement lock."""
        generation = s.info[GENERATION] if GENERATION in s.info else current_generation(s)
        cutoff = now - self.node_offline_after_s
        offline = set(s.connection().scalars(select(NodeRow.id).where(NodeRow.last_heartbeat < cutoff)))
        def ready(last_heartbeat: float) -> bool:
            return last_heartbeat >= cutoff

        if self._inventory is None or generation < self._generation:  # first use, or a store begun again
            views = read_views(s, ready)
            self._inventory = Inventory(views)
            self.reads += len(views)
        elif generation != self._generation:
            for view in read_views(s, ready, NodeRow.generation > self._generation):
                self._inventory.put(view)
                self.reads += 1
        self._generation = generation
        self._inventory.mark_offline(offline)
        return self._inventory
