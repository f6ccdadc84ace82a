"""Placement: reserve and release what a copy holds (GPUs and ports for every rank, a service's port),
atomically across API processes.

A placement transaction holds a lock in the process and updates the `placement` row of `store_locks`
first, so placements are serialised across API processes too (a row lock on Postgres, the write lock on
SQLite); that update also draws the transaction's generation (server/store/placement_view.py). The scheduler
(server/scheduler.py, indexed by server/inventory.py) chooses from this process's view of the nodes, which each
write here keeps current for every process; this module writes the rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import NamedTuple, Protocol

from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.orm import Session

from berth.contracts import Placement, RankPlacement, ReserveRequest, ReserveResult
from berth.errors import NotFoundError, UnavailableError
from server import scheduler
from server.gpu_health import SKIP_NONE, GpuHealthRule
from server.inventory import Inventory
from server.site_placement import site_demand
from server.store import copy_spans, fencing, mig_view, placement_view
from server.store.policies import placement_refusal
from server.store.tables import AllocationRow, NodeRow, PortRow, ReplicaRow, ReservationRow

RESERVED = select(ReservationRow.placement).where(ReservationRow.copy_id == bindparam("copy_id"))


class PlacementObserver(Protocol):
    """Who is told of each placement decision (the control plane's metrics, server/control_metrics.py)."""

    def reserved(self, request: ReserveRequest, result: ReserveResult, seconds: float) -> None: ...

    def released(self, copy_id: str) -> None: ...


class CapacitySnapshot(NamedTuple):
    """What the capacity figures are made of (server/capacity_figures.py), read in one transaction."""

    views: list[scheduler.NodeView]
    holders: dict[tuple[str, int], str]  # (node id, GPU index) → the copy holding it, fenced or not
    serving: frozenset[str]  # the copies published ready


class Placements:
    """The store's reservations, allocations and ports, written only inside `transaction()`."""

    def __init__(self, session: Callable[[], AbstractContextManager[Session]], node_offline_after_s: float,
                 policy: scheduler.Policy, gpu_health: GpuHealthRule = SKIP_NONE) -> None:
        self._session = session
        self._lock = threading.Lock()
        self.node_offline_after_s = node_offline_after_s
        self.policy = policy
        self.observer: PlacementObserver | None = None  # set by the app that serves metrics
        self.clock: Callable[[], float] = time.time  # the copy spans' times (a test's scripted clock)
        self.gpu_health = gpu_health  # which GPUs placement skips (the cluster's max_gpu_temp_c, reject_ecc)
        self.view = placement_view.PlacementView(node_offline_after_s, gpu_health)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A transaction no other placement (in this process or another API process) runs beside."""
        with self._lock:
            try:
                with self._session() as s:
                    placement_view.take(s)
                    yield s
            except BaseException:
                # A reservation keeps what it took in the view before its commit: if the commit (or anything after
                # `took`) fails, the view no longer matches the store. Re-read it, still under the lock.
                self.view.forget()
                raise

    def node_ready(self, node: NodeRow, now: float | None = None) -> bool:
        """Heartbeating recently (draining nodes are ready but take no new copies)."""
        now = time.time() if now is None else now
        return now - node.last_heartbeat <= self.node_offline_after_s

    def allocations(self) -> list[AllocationRow]:
        with self._session() as s:
            return list(s.scalars(select(AllocationRow)).all())

    def reservations(self, workflow_id: str | None = None) -> list[ReservationRow]:
        with self._session() as s:
            query = select(ReservationRow)
            if workflow_id:
                query = query.where(ReservationRow.workflow_id == workflow_id)
            return list(s.scalars(query).all())

    def _views(self, s: Session, now: float) -> list[scheduler.NodeView]:
        """Every node's snapshot, read afresh (capacity and explain placement: their answer lists every node)."""
        return placement_view.read_views(s, lambda last_heartbeat: now - last_heartbeat <= self.node_offline_after_s,
                                         health=self.gpu_health)

    def node_views(self) -> list[scheduler.NodeView]:
        with self._session() as s:
            return self._views(s, time.time())

    def capacity_snapshot(self) -> CapacitySnapshot:
        with self._session() as s:
            views = self._views(s, time.time())
            held = s.execute(select(AllocationRow.node_id, AllocationRow.gpu_index, AllocationRow.copy_id))
            holders = {(node_id, gpu_index): copy_id for node_id, gpu_index, copy_id in held}
            serving = frozenset(s.scalars(select(ReplicaRow.copy_id).where(ReplicaRow.ready.is_(True))))
        return CapacitySnapshot(views, holders, serving)

    def reserve(self, request: ReserveRequest) -> ReserveResult:
        """Atomically place a copy: GPUs and ports for every rank, or the reason it must wait."""
        started = time.perf_counter()
        result = self._reserve(request)
        if self.observer is not None:  # after the commit: the time told is the whole transaction's
            self.observer.reserved(request, result, time.perf_counter() - started)
        return result

    def _reserve(self, request: ReserveRequest) -> ReserveResult:
        with self.transaction() as s:
            existing = s.connection().execute(RESERVED, {"copy_id": request.copy_id}).scalar()
            if existing is not None:  # an activity retry after a lost reply: same answer
                return ReserveResult(placement=Placement.model_validate(existing))
            demand = scheduler.Demand(nodes=request.nodes, gpus_per_node=request.gpus_per_node,
                                      gpu_memory_gb=request.gpu_memory_gb, prefer_volume=request.prefer_volume,
                                      prefer_model=request.prefer_model)
            # Quotas first (docs/policies.md): a copy they refuse waits, whatever the nodes have free.
            refused = placement_refusal(s, request.workflow_id, request.nodes * request.gpus_per_node)
            if refused is not None:
                return ReserveResult(blocked_reason=refused)
            if request.placed_by == "slurm":
                return self._held_for_slurm(s, request)
            inventory = self.view.current(s, time.time())
            sites = site_demand(request.sites, self._pool_nodes(s, request, inventory))
            if sites is not None:
                demand = dataclasses.replace(demand, sites=sites)
            decision = inventory.place(demand, self.policy)
            if request.gpus_per_node > 1 and mig_view.on_slices(decision, inventory):  # rare: scan, slices left out
                decision = scheduler.place(demand, [mig_view.whole(node) for node in inventory.views()], self.policy)
            if decision.blocked_reason is not None:
                return ReserveResult(blocked_reason=decision.blocked_reason)
            return self._hold(s, request, decision)

    @staticmethod
    def _pool_nodes(s: Session, request: ReserveRequest,
                    inventory: Inventory) -> list[list[tuple[str, str | None, str | None]]]:
        """The (node id, site, failure domain) of each node of each of the pool's other copies: what its site rules
        and the spread across failure domains count. Read only where they can matter (a rule, or a node that
        reports a site or domain), through the ports each rank holds (CPU copies hold no GPU): plain columns, no
        placement JSON to decode, since a pool may hold thousands of copies."""
        if request.sites is None and not inventory.labelled():
            return []
        held = (select(PortRow.owner, PortRow.node_id).distinct()
                .join(ReservationRow, ReservationRow.copy_id == PortRow.owner)
                .where(ReservationRow.workflow_id == request.workflow_id, PortRow.owner != request.copy_id))
        copies: dict[str, list[tuple[str, str | None, str | None]]] = {}
        for copy_id, node_id in s.connection().execute(held):
            view = inventory.get(node_id)
            if view is not None:
                copies.setdefault(copy_id, []).append((view.id, view.site, view.failure_domain))
        return list(copies.values())

    def _hold(self, s: Session, request: ReserveRequest, decision: scheduler.Decision) -> ReserveResult:
        """Write the decision's GPUs, a port per rank (two on rank 0 of a multi-node copy) and the reservation; or
        nothing, when a chosen node has no port left: rows written for the ranks before would be held by no one."""
        connection = s.connection()  # Core, not the ORM, from here on: the ORM's own work cost more than the SQL
        chosen = [node_id for node_id, _gpus in decision.ranks]
        nodes = {row.id: row for row in connection.execute(
            select(NodeRow.id, NodeRow.address, NodeRow.port_start, NodeRow.port_end).where(NodeRow.id.in_(chosen)))}
        used_ports: dict[str, set[int]] = {}
        for node_id, port in connection.execute(
                select(PortRow.node_id, PortRow.port).where(PortRow.node_id.in_(chosen))):
            used_ports.setdefault(node_id, set()).add(port)
        ports: list[list[int]] = []
        for rank, node_id in enumerate(chosen):
            node, wanted = nodes[node_id], 2 if rank == 0 and request.nodes > 1 else 1
            free = [p for p in range(node.port_start, node.port_end) if p not in used_ports.get(node_id, set())]
            if len(free) < wanted:
                return ReserveResult(blocked_reason=f"node {node_id} has no free service port")
            ports.append(free[:wanted])
        ranks = [RankPlacement(rank=rank, node_id=node_id, address=nodes[node_id].address, gpus=tuple(gpus),
                               port=rank_ports[0], devices=self.view.devices(node_id, gpus))
                 for rank, ((node_id, gpus), rank_ports) in enumerate(zip(decision.ranks, ports, strict=True))]
        gpus_held = [{"node_id": node_id, "gpu_index": gpu, "copy_id": request.copy_id}
                     for node_id, gpus in decision.ranks for gpu in gpus]
        if gpus_held:  # none for a copy without GPUs (an empty list would insert one row of NULLs)
            connection.execute(insert(AllocationRow), gpus_held)
        connection.execute(insert(PortRow), [{"node_id": node_id, "port": port, "owner": request.copy_id}
                                             for node_id, taken in zip(chosen, ports, strict=True) for port in taken])
        placement_view.changed(s, chosen)
        self.view.took(s, decision.ranks)
        master_port = ports[0][1] if len(ports[0]) == 2 else 0
        placement = Placement(copy_id=request.copy_id, ranks=tuple(ranks), master_port=master_port)
        return self._recorded(s, request, placement)

    def _held_for_slurm(self, s: Session, request: ReserveRequest) -> ReserveResult:
        """A copy Slurm places, held as a reservation of its GPUs on nodes Slurm will choose (node_id "slurm"): its
        quotas counted, its usage span opened, its publish and release as any copy's, no Berth node's GPU or port
        taken."""
        ranks = tuple(RankPlacement(rank=rank, node_id="slurm", address="", gpus=tuple(range(request.gpus_per_node)),
                                    port=0) for rank in range(request.nodes))
        placement = Placement(copy_id=request.copy_id, ranks=ranks)
        return self._recorded(s, request, placement)

    def _recorded(self, s: Session, request: ReserveRequest, placement: Placement) -> ReserveResult:
        """The reservation row and the copy's usage span opened (core inserts: no ORM unit of work per copy)."""
        row = {"copy_id": request.copy_id, "workflow_id": request.workflow_id,
               "placement": placement.model_dump(mode="json"), "created_at": time.time()}
        s.connection().execute(insert(ReservationRow), [row])
        copy_spans.opened(s, request, self.clock())
        return ReserveResult(placement=placement)

    def reserve_port(self, owner: str, node_id: str) -> int:
        """One port on a node for a service (not a rank): LiteLLM proxy, gateway, OpenCode."""
        with self.transaction() as s:
            existing = s.scalars(select(PortRow).where(PortRow.owner == owner, PortRow.node_id == node_id)).first()
            if existing is not None:
                return existing.port
            node = s.get(NodeRow, node_id)
            if node is None:
                raise NotFoundError(f"No node '{node_id}'.")
            used = set(s.scalars(select(PortRow.port).where(PortRow.node_id == node_id)).all())
            for port in range(node.port_start, node.port_end):
                if port not in used:
                    s.add(PortRow(node_id=node_id, port=port, owner=owner))
                    return port
            raise NotFoundError(f"Node '{node_id}' has no free service port.")

    def reserve_service_port(self, owner: str) -> tuple[NodeRow, int]:
        """A port for a service on a ready node: the one `owner` already holds if its node is still
        ready (a restart keeps its address), else the first ready, undrained node with a free port."""
        now = time.time()
        with self._session() as s:
            held = s.scalars(select(PortRow).where(PortRow.owner == owner)).first()
            nodes = list(s.scalars(select(NodeRow).order_by(NodeRow.id)).all())
        by_id = {n.id: n for n in nodes}
        if held is not None and held.node_id in by_id and self.node_ready(by_id[held.node_id], now):
            return by_id[held.node_id], held.port
        self.release(owner)
        for node in nodes:
            if self.node_ready(node, now) and not node.draining:
                with contextlib.suppress(NotFoundError):
                    return node, self.reserve_port(owner, node.id)
        raise UnavailableError("No ready node has a free port for the service; it waits for one.")

    def release(self, copy_id: str) -> bool:
        """Free what `copy_id` holds, except what is fenced: that is freed when its node says so. True when it held
        a reservation (a retried release, or a service's port, finds none)."""
        with self.transaction() as s:
            freed = fencing.not_fenced(AllocationRow.fenced)
            nodes = set(s.scalars(select(AllocationRow.node_id).where(AllocationRow.copy_id == copy_id, freed)))
            s.execute(delete(AllocationRow).where(AllocationRow.copy_id == copy_id, freed))
            placement_view.changed(s, nodes)
            s.execute(delete(PortRow).where(PortRow.owner == copy_id, fencing.not_fenced(PortRow.fenced)))
            held = s.execute(delete(ReservationRow).where(ReservationRow.copy_id == copy_id))
            copy_spans.closed(s, copy_id, self.clock())
            # A released copy serves nothing: its record goes with it (see `publish`).
            s.execute(delete(ReplicaRow).where(ReplicaRow.copy_id == copy_id))
        if self.observer is not None:
            self.observer.released(copy_id)
        return bool(held.rowcount)  # type: ignore[attr-defined]

    def publish(self, workflow_id: str, endpoint_id: str, copy_id: str, url: str, ready: bool,
                revision: int = 1) -> bool:
        """Publish a copy that holds its placement; False (nothing written) for one already released. A
        stop does not wait for a publish it cancelled, so that publish may land after the stop's unpublish:
        it must find the placement gone and write nothing, or proxies would route to a stopped copy."""
        with self.transaction() as s:
            if s.get(ReservationRow, copy_id) is None:
                return False
            upsert_replica_row(s, workflow_id, endpoint_id, copy_id, url, ready, revision=revision)
            if ready:
                copy_spans.ready(s, copy_id, self.clock())
            return True

    def published_copies_on(self, node_id: str) -> dict[str, list[str]]:
        """The published copies holding a GPU or a port on a node, by workflow (what a drain moves)."""
        with self._session() as s:
            held = set(s.scalars(select(AllocationRow.copy_id).where(AllocationRow.node_id == node_id)).all())
            held |= set(s.scalars(select(PortRow.owner).where(PortRow.node_id == node_id)).all())
            rows = s.scalars(select(ReplicaRow).where(ReplicaRow.copy_id.in_(held))).all() if held else []
            by_workflow: dict[str, list[str]] = {}
            for row in rows:
                by_workflow.setdefault(row.workflow_id, []).append(row.copy_id)
        return by_workflow

    def fence(self, copy_id: str, nodes: tuple[str, ...]) -> None:
        with self.transaction() as s:
            fencing.fence(s, copy_id, nodes)


def upsert_replica_row(s: Session, workflow_id: str, endpoint_id: str, copy_id: str, url: str, ready: bool,
                       draining: bool = False, revision: int = 1) -> None:
    row = s.get(ReplicaRow, copy_id)
    if row is None:
        s.add(ReplicaRow(copy_id=copy_id, endpoint_id=endpoint_id, workflow_id=workflow_id, url=url,
                         ready=ready, draining=draining, updated_at=time.time(), revision=revision))
    else:
        row.url, row.ready, row.draining, row.updated_at = url, ready, draining, time.time()
        row.revision = revision
