"""Inventory: the cluster's NodeViews indexed so that `place` answers without visiting every node.

`scheduler.place` scans every node per decision (0.4 ms at 1,000 nodes, 4 ms at 10,000: 40 s for 10,000 copies).
Here the nodes that can take a copy (ready, undrained, untainted) sit in buckets by how many GPUs they have free,
one set of buckets per GPU memory size in the cluster ("GPUs free with ≥ S GB"), each bucket's ids sorted; a
decision walks the buckets in the policy's order and stops at the first fitting nodes. The answer is exactly
`scheduler.place`'s over the same nodes (tests/server/test_inventory.py compares them on random clusters); a
demand the index cannot answer (a CPU slot, too many distinct GPU sizes) falls back to that scan. A pool's site rules
and its copies' failure domains (server/site_placement.py) are walked through the same buckets (server/site_walk.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from server import site_walk
from server.scheduler import Decision, Demand, NodeView, Policy, blocked, place, score

# Each distinct GPU memory size costs a set of buckets, updated on every change: past this many, scan instead.
MAX_MEMORY_SIZES = 16


class Inventory:
    """NodeViews by id, with the index `place` reads; changed only through `put` and `mark_offline`."""

    def __init__(self, views: Iterable[NodeView] = ()) -> None:
        self._nodes: dict[str, NodeView] = {}
        self._closed: Counter[str] = Counter()  # offline / draining / tainted: `unavailable`'s verdicts
        self._sizes: list[float] = []  # the distinct GPU memory sizes, ascending: one set of buckets each
        self._buckets: dict[float, dict[int, list[str]]] = {}  # size → free GPUs of ≥ size → sorted node ids
        self._by_volume: dict[str, set[str]] = {}
        self._by_model: dict[str, set[str]] = {}
        self._offline: set[str] = set()  # the ids of the nodes not ready
        self._labelled: set[str] = set()  # the ids of the nodes that report a site or failure domain
        self._groups: Counter[tuple[str | None, str | None]] = Counter()  # (site, failure domain) → its nodes
        self._too_many_sizes = False
        for view in views:
            self.put(view)

    def __len__(self) -> int:
        return len(self._nodes)

    def views(self) -> list[NodeView]:
        return list(self._nodes.values())

    def get(self, node_id: str) -> NodeView | None:
        return self._nodes.get(node_id)

    def put(self, view: NodeView) -> None:
        """Add a node, or replace what is known of it."""
        old = self._nodes.pop(view.id, None)
        if old is not None:
            self._unindex(old)
        for gpu in view.gpus:  # before the node joins: a new size's buckets are filled from the others
            if gpu.memory_gb not in self._buckets and not self._too_many_sizes:
                self._too_many_sizes = len(self._sizes) == MAX_MEMORY_SIZES
                if not self._too_many_sizes:
                    self._add_size(gpu.memory_gb)
        self._nodes[view.id] = view
        self._index(view)

    def labelled(self) -> bool:
        """Whether any node reports a site or failure domain (a pool's copies spread across them)."""
        return bool(self._labelled)

    def mark_offline(self, offline: set[str]) -> None:
        """Make exactly the nodes in `offline` not ready (the store reads that set fresh for each decision)."""
        for node_id in (offline ^ self._offline) & self._nodes.keys():
            self.put(replace(self._nodes[node_id], ready=node_id not in offline))

    def place(self, demand: Demand, policy: Policy = Policy.PACK) -> Decision:
        """`scheduler.place(demand, self.views(), policy)`, read from the index."""
        if demand.gpus_per_node < 1 or self._too_many_sizes:
            return place(demand, self.views(), policy)
        size = self._size_for(demand.min_gpu_memory_gb)
        buckets = self._buckets.get(size, {}) if size is not None else {}
        fitting = sum(len(ids) for free, ids in buckets.items() if free >= demand.gpus_per_node)
        if demand.sites is not None:  # the pool's site rules and its copies' domains (server/site_walk.py)
            return self._place_sited(demand, buckets, fitting, policy)
        if fitting < demand.nodes:
            available = len(self._nodes) - sum(self._closed.values())
            reasons = {"offline": self._closed["offline"], "draining": self._closed["draining"],
                       "tainted": self._closed["tainted"], "busy": available - fitting}
            return blocked(demand, fitting, reasons)
        assert size is not None  # fitting > 0
        chosen = self._preferred(demand, size, policy)
        taken = {node.id for node in chosen} | self._preferred_ids(demand)
        order = sorted((free for free in buckets if free >= demand.gpus_per_node), reverse=policy is Policy.SPREAD)
        for free in order:
            for node_id in buckets[free]:
                if len(chosen) == demand.nodes:
                    break
                if node_id not in taken:
                    chosen.append(self._nodes[node_id])
        min_memory, gpus = demand.min_gpu_memory_gb, demand.gpus_per_node
        return Decision(ranks=[(node.id, node.free_gpus(min_memory)[:gpus]) for node in chosen[:demand.nodes]])

    def _place_sited(self, demand: Demand, buckets: dict[int, list[str]], fitting: int, policy: Policy) -> Decision:
        """A copy with site terms: the fitting nodes walked in the buckets' order (server/site_walk.py)."""
        chosen = None
        if fitting >= demand.nodes:
            order = sorted((free for free in buckets if free >= demand.gpus_per_node),
                           reverse=policy is Policy.SPREAD)
            walk = (node_id for free in order for node_id in buckets[free])
            chosen = site_walk.best(demand, policy, self._nodes, walk, self._preferred_ids(demand),
                                    site_walk.floor_of(demand, self._groups))
        if chosen is None:  # it waits: the scan counts the nodes each filter turned away, site filters included
            return place(demand, self.views(), policy)
        min_memory, gpus = demand.min_gpu_memory_gb, demand.gpus_per_node
        return Decision(ranks=[(node.id, node.free_gpus(min_memory)[:gpus]) for node in chosen])

    def _preferred_ids(self, demand: Demand) -> set[str]:
        ids = set(self._by_volume.get(demand.prefer_volume, ())) if demand.prefer_volume else set()
        if demand.prefer_model:
            ids |= self._by_model.get(demand.prefer_model, set())
        return ids

    def _preferred(self, demand: Demand, size: float, policy: Policy) -> list[NodeView]:
        """The fitting nodes that hold the model (score's first term), best first: scanned, as they are few."""
        scored = []
        for node_id in self._preferred_ids(demand):
            node = self._nodes[node_id]
            if node.unavailable() is None:
                free = node.free_count(size)
                if free >= demand.gpus_per_node:
                    scored.append((score(node, free, demand, policy), node))
        scored.sort(key=lambda item: item[0])
        return [node for _key, node in scored[:demand.nodes]]

    def _size_for(self, min_memory_gb: float) -> float | None:
        """The smallest GPU size in the cluster that holds `min_memory_gb`: a node's GPUs of at least that size
        are exactly its GPUs of at least `min_memory_gb` (None: no GPU anywhere is big enough)."""
        at = bisect_left(self._sizes, min_memory_gb)
        return self._sizes[at] if at < len(self._sizes) else None

    def _add_size(self, size: float) -> None:
        insort(self._sizes, size)
        self._buckets[size] = {}
        for node in self._nodes.values():
            if node.unavailable() is None:
                insort(self._buckets[size].setdefault(node.free_count(size), []), node.id)

    def _index(self, node: NodeView) -> None:
        if not node.ready:
            self._offline.add(node.id)
        if node.site is not None or node.failure_domain is not None:
            self._labelled.add(node.id)
        self._groups[node.site, node.failure_domain] += 1
        for volume in node.volumes:
            self._by_volume.setdefault(volume, set()).add(node.id)
        for model in node.models:
            self._by_model.setdefault(model, set()).add(node.id)
        closed = node.unavailable()
        if closed is not None:
            self._closed[closed] += 1
            return
        for size, buckets in self._buckets.items():
            insort(buckets.setdefault(node.free_count(size), []), node.id)

    def _unindex(self, node: NodeView) -> None:
        self._offline.discard(node.id)
        self._labelled.discard(node.id)
        group = node.site, node.failure_domain
        self._groups[group] -= 1
        if not self._groups[group]:
            del self._groups[group]
        for volume in node.volumes:
            self._by_volume[volume].discard(node.id)
        for model in node.models:
            self._by_model[model].discard(node.id)
        closed = node.unavailable()
        if closed is not None:
            self._closed[closed] -= 1
            return
        for size, buckets in self._buckets.items():
            ids = buckets[node.free_count(size)]
            del ids[bisect_left(ids, node.id)]
