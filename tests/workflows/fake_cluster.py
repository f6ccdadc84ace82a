"""FakeCluster: the control worker's and the node agents' activities, mocked under their real names, over a
placement book and rank processes the test crashes or silences; every call is recorded for the test to read."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

from berth.contracts import (
    CopyRecord,
    EndpointFront,
    FenceRequest,
    FrontPort,
    FrontPortRequest,
    Placement,
    RankPlacement,
    ReserveRequest,
    ReserveResult,
    RevisionHealth,
)
from berth.settings import node_task_queue
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import (
    CleanupInput,
    DrainInput,
    DrainResult,
    FrontExit,
    FrontRun,
    LiveCheck,
    RankExit,
    RankSpec,
    ReadyCheck,
)
from workflows.rollout_payloads import HealthInput, ServeInput, TrafficInput

# A node agent's heartbeat cadence while it owns a process (the SDK throttles what it sends to the server).
HEARTBEAT_EVERY_S = 0.1


@dataclass
class FakeNode:
    node_id: str
    gpus: int = 1
    # How many activities its agent runs at once (None: the SDK's default). A silenced agent with every slot
    # taken polls for nothing more: an adopt_rank sent to it waits, as for an agent that is gone.
    slots: int | None = None
    silent: bool = False  # the agent stopped answering: no heartbeats, never placed on again


@dataclass
class FakeRank:
    """One rank "process": runs until the test ends it (`exit`) or its copy cancels it."""

    spec: RankSpec
    node_id: str
    running: bool = True
    cancelled: bool = False
    exit: RankExit | None = None
    owner: int = 0  # which activity owns it now: an adoption takes it from the one that went silent


@dataclass
class FakeCluster:
    nodes: list[FakeNode]
    crash_on_start: int | None = None  # every rank started exits at once with this status
    placements: dict[str, Placement] = field(default_factory=dict)
    ranks: dict[tuple[str, int], FakeRank] = field(default_factory=dict)
    published: dict[str, CopyRecord] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    # A rollout's split as last set (None: by copy count), and each revision's health as the proxies saw it.
    traffic: dict[int, int] | None = None
    health: dict[int, RevisionHealth] = field(default_factory=dict)
    # The endpoint's front process (LiteLLM): each run_service is one "process"; `routes` is what the endpoint
    # routes to (set_endpoint_service), `front_exit` ends the running one as a crash would.
    routes: dict[str, str | None] = field(default_factory=dict)
    front_exit: FrontExit | None = None
    fronts_running: int = 0
    front_goes_live: bool = True  # False: its liveness probe waits until the test sets it
    publish_gate: asyncio.Event | None = None  # set: publish_replica waits for it before it writes
    drain_gate: asyncio.Event | None = None  # set: drain_replica waits for it (in-flight requests finishing)
    reserve_gate: asyncio.Event | None = None  # set: reserve_placement waits for it before it places
    quota_line: str | None = None  # set: every reserve is blocked with this line (a quota's refusal)
    _ports: itertools.count[int] = field(default_factory=lambda: itertools.count(20000))

    # --- what the test reads and does -----------------------------------------------------------
    def node(self, node_id: str) -> FakeNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def called(self, name: str) -> list[Any]:
        return [argument for called, argument in self.calls if called == name]

    def crash(self, copy_id: str, rank: int = 0, exit_code: int | None = None, signal: int | None = None) -> None:
        """The rank's process ends by itself with this status (the run_rank activity returns it)."""
        process = self.ranks[(copy_id, rank)]
        process.exit = RankExit(rank=rank, node_id=process.node_id, exit_code=exit_code, signal=signal,
                                reason="exited", log_tail="Traceback: the engine crashed")

    def silence(self, node_id: str) -> None:
        """The node's agent hangs: its processes live on, but it heartbeats no more and takes no new work."""
        self.node(node_id).silent = True

    def copy_ranks(self, copy_id: str) -> list[FakeRank]:
        return [process for (copy, _), process in sorted(self.ranks.items()) if copy == copy_id]

    def serving(self, copy_id: str) -> bool:
        placement = self.placements.get(copy_id)
        return placement is not None and all(
            (copy_id, r.rank) in self.ranks and self.ranks[(copy_id, r.rank)].running for r in placement.ranks)

    def _free_gpus(self, node: FakeNode) -> int:
        held = sum(1 for p in self.placements.values() for r in p.ranks if r.node_id == node.node_id)
        return node.gpus - held

    def _record(self, name: str, argument: Any) -> None:
        self.calls.append((name, argument))

    # --- the control worker's activities (activities/control.py) ---------------------------------
    @implements(stubs.reserve_placement)
    async def reserve_placement(self, request: ReserveRequest) -> ReserveResult:
        self._record("reserve_placement", request)
        if self.reserve_gate is not None:
            await self.reserve_gate.wait()
        if request.copy_id in self.placements:  # a retried reserve gets what the first one placed
            return ReserveResult(placement=self.placements[request.copy_id])
        if self.quota_line is not None:  # a quota refuses every copy until the test lifts it
            return ReserveResult(blocked_reason=self.quota_line)
        if request.placed_by == "slurm":  # Slurm chooses the nodes: only the reservation is held
            self.placements[request.copy_id] = Placement(copy_id=request.copy_id, ranks=tuple(
                RankPlacement(rank=r, node_id="slurm", address="", port=0) for r in range(request.nodes)))
            return ReserveResult(placement=self.placements[request.copy_id])
        free = [n for n in self.nodes if not n.silent and self._free_gpus(n) >= max(request.gpus_per_node, 1)]
        if len(free) < request.nodes:
            return ReserveResult(blocked_reason=f"{request.nodes} nodes with a free GPU needed, {len(free)} have one")
        ranks = tuple(RankPlacement(rank=index, node_id=node.node_id, address="127.0.0.1", gpus=(0,),
                                    port=next(self._ports)) for index, node in enumerate(free[:request.nodes]))
        placement = Placement(copy_id=request.copy_id, ranks=ranks, master_port=next(self._ports))
        self.placements[request.copy_id] = placement
        return ReserveResult(placement=placement)

    @implements(stubs.release_placement)
    async def release_placement(self, copy_id: str) -> None:
        self._record("release_placement", copy_id)
        self.placements.pop(copy_id, None)
        self.published.pop(copy_id, None)  # as Placements.release: a released copy's record goes with it

    @implements(stubs.fence_placement)
    async def fence_placement(self, request: FenceRequest) -> None:
        self._record("fence_placement", request)

    @implements(stubs.publish_replica)
    async def publish_replica(self, record: CopyRecord) -> None:
        self._record("publish_replica", record)
        if self.publish_gate is not None:  # a slow control plane: the publish lands when the test says
            await self.publish_gate.wait()
        if record.copy_id in self.placements:  # as Placements.publish: a released copy publishes nothing
            self.published[record.copy_id] = record
        self._record("publish_landed", record.copy_id)

    @implements(stubs.unpublish_replica)
    async def unpublish_replica(self, copy_id: str) -> None:
        self._record("unpublish_replica", copy_id)
        self.published.pop(copy_id, None)

    @implements(stubs.drain_replica)
    async def drain_replica(self, request: DrainInput) -> DrainResult:
        self._record("drain_replica", request)
        self.published.pop(request.copy_id, None)
        if self.drain_gate is not None:
            await self.drain_gate.wait()
        return DrainResult(drained=True, waited_s=0.0)

    @implements(stubs.remove_endpoint)
    async def remove_endpoint(self, request: CleanupInput) -> None:
        self._record("remove_endpoint", request)

    @implements(stubs.reserve_service_port)
    async def reserve_service_port(self, request: FrontPortRequest) -> FrontPort:
        self._record("reserve_service_port", request)
        return FrontPort(node_id=self.nodes[0].node_id, address="127.0.0.1", port=next(self._ports))

    @implements(stubs.set_endpoint_service)
    async def set_endpoint_service(self, update: EndpointFront) -> None:
        self._record("set_endpoint_service", update)
        self.routes[update.endpoint_id] = update.url

    def control_activities(self) -> list[Callable[..., Any]]:
        return [self.reserve_placement, self.release_placement, self.fence_placement, self.publish_replica,
                self.unpublish_replica, self.drain_replica, self.remove_endpoint, self.reserve_service_port,
                self.set_endpoint_service, self.set_traffic, self.revision_health, self.serve_revision]

    @implements(stubs.set_traffic)
    async def set_traffic(self, request: TrafficInput) -> None:
        self._record("set_traffic", request)
        self.traffic = request.weights

    @implements(stubs.serve_revision)
    async def serve_revision(self, request: ServeInput) -> None:
        self._record("serve_revision", request)

    @implements(stubs.revision_health)
    async def revision_health(self, request: HealthInput) -> RevisionHealth:
        """What the endpoint proxies saw of a revision: as the test sets it per revision (none: healthy)."""
        self._record("revision_health", request)
        return self.health.get(request.revision, RevisionHealth(revision=request.revision))

    def crash_front(self, exit_code: int = 1) -> None:
        self.front_exit = FrontExit(name="litellm", node_id=self.nodes[0].node_id, exit_code=exit_code)

    @implements(stubs.run_service)
    async def run_service(self, run: FrontRun) -> FrontExit:
        """The front process: runs until `crash_front` or its workflow stops it."""
        self._record("run_service", run)
        self.fronts_running += 1
        try:
            await self._beat_until(lambda: self.front_exit is not None, self._this_node())
        finally:
            self.fronts_running -= 1
        exit_info, self.front_exit = self.front_exit, None
        assert exit_info is not None
        return exit_info

    @implements(stubs.wait_live)
    async def wait_live(self, check: LiveCheck) -> float:
        self._record("wait_live", check)
        await self._beat_until(lambda: self.front_goes_live, self._this_node())
        return 0.5

    # --- a node agent's activities (activities/ranks.py), on each node's own task queue ---------------
    @implements(stubs.run_rank)
    async def run_rank(self, spec: RankSpec) -> RankExit:
        node_id = self._this_node()
        self._record("run_rank", spec)
        process = FakeRank(spec=spec, node_id=node_id)
        self.ranks[(spec.copy_id, spec.rank)] = process
        if self.crash_on_start is not None:
            process.running = False
            return RankExit(rank=spec.rank, node_id=node_id, exit_code=self.crash_on_start, reason="exited",
                            log_tail="Traceback: the engine crashed while loading")
        return await self._own(process)

    @implements(stubs.adopt_rank)
    async def adopt_rank(self, spec: RankSpec) -> RankExit:
        """A restarted agent takes the live process back (the agent answers again after a pause)."""
        self._record("adopt_rank", spec)
        return await self._own(self.ranks[(spec.copy_id, spec.rank)])

    @implements(stubs.wait_ready)
    async def wait_ready(self, check: ReadyCheck) -> None:
        """Ready once every rank of the copy runs (a copy whose rank ended is never ready)."""
        self._record("wait_ready", check)
        await self._beat_until(lambda: self.serving(check.copy_id), self._this_node())

    def node_activities(self) -> list[Callable[..., Any]]:
        return [self.run_rank, self.adopt_rank, self.wait_ready, self.run_service, self.wait_live]

    async def _own(self, process: FakeRank) -> RankExit:
        process.owner += 1
        owner = process.owner
        process.running = True
        try:
            await self._beat_until(lambda: process.exit is not None, process.node_id)
        except asyncio.CancelledError:  # the copy stops it (the real agent: SIGTERM, then SIGKILL)
            # An activity the server already gave up on (its agent went silent) is cancelled too, once its
            # heartbeats resume: the process is its adopter's by then.
            if owner == process.owner:
                process.cancelled = True
            raise
        finally:
            if owner == process.owner:
                process.running = False
        assert process.exit is not None
        return process.exit

    async def _beat_until(self, done: Callable[[], bool], node_id: str) -> None:
        """Heartbeat while waiting (cancellation arrives with a heartbeat's answer); a silent agent does not."""
        node = self.node(node_id)
        while not done():
            if not node.silent:
                activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_S)

    def _this_node(self) -> str:
        queue = activity.info().task_queue
        return next(n.node_id for n in self.nodes if node_task_queue(n.node_id) == queue)
