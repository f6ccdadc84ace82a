"""ControlMetrics: the control plane's Prometheus figures (prometheus-client, one registry per app).

What the store holds (copies, nodes, GPUs) is read when Prometheus scrapes, by a collector; pool workflows'
phases are asked of Temporal at most every PHASE_CACHE_S; placement decisions are told by the store's
placements (server/store/placement.py); the only per-request work is one histogram observation (RequestTimer).
Labels are bounded: route templates, never raw paths; node ids and fixed enums; never users, keys or copy ids.
Names and labels are listed in docs/operations.md."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from berth.contracts import ReserveRequest, ReserveResult
from berth.contracts.workflows import Phase
from berth.settings import metrics_enabled
from server.context import ServerContext
from server.store.database import Store
from workflows.copy import MAX_BLOCKED_BACKOFF_S

log = logging.getLogger(__name__)

UNMATCHED = "unmatched"
UNKNOWN_PHASE = "unknown"  # a running workflow that did not answer its status query
PHASES = tuple(p.value for p in Phase) + (UNKNOWN_PHASE,)
PHASE_CACHE_S = 10.0  # Temporal is asked at most this often, however often Prometheus scrapes
PHASE_READ_TIMEOUT_S = 5.0  # a whole reading; a scrape waits no longer (Prometheus' default timeout is 10 s)
PHASE_QUERY_TIMEOUT_S = 2.0
PHASE_QUERIES = 16  # at once, as `GET /v1/workflows` bounds them
MAX_READ_WORKFLOWS = 10_000
# A blocked copy asks again at least every MAX_BLOCKED_BACKOFF_S (workflows/copy.py); one not heard of for
# several of those stopped asking (its workflow ended without a release reaching this process).
BLOCKED_FRESH_S = 6 * MAX_BLOCKED_BACKOFF_S
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Seconds: a health check's millisecond to a slow listing's tens of seconds.
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# One placement transaction: a few ms on SQLite, more when API processes queue on the placement lock.
RESERVE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

PhaseReader = Callable[[], Awaitable[Mapping[str, int]]]


class BlockedCopies:
    """Copies whose latest reserve (in this API process) was refused, forgotten once placed, released or
    silent for BLOCKED_FRESH_S. Told from the thread pool the store runs in, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_refused: dict[str, float] = {}

    def refused(self, copy_id: str) -> None:
        with self._lock:
            self._last_refused[copy_id] = time.monotonic()

    def forget(self, copy_id: str) -> None:
        with self._lock:
            self._last_refused.pop(copy_id, None)

    def count(self) -> int:
        oldest = time.monotonic() - BLOCKED_FRESH_S
        with self._lock:
            for copy_id in [c for c, at in self._last_refused.items() if at < oldest]:
                del self._last_refused[copy_id]
            return len(self._last_refused)


class PhaseCache:
    """Pool workflows by phase, read through `reader` at most every PHASE_CACHE_S; a failed or slow
    reading keeps the last figures (and is counted), so a Temporal outage never fails a scrape."""

    def __init__(self, reader: PhaseReader, failures: Counter,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reader = reader
        self._clock = clock
        self._failures = failures
        self._lock = asyncio.Lock()
        self._read_at: float | None = None
        self.figures: dict[str, int] = {}
        self._said_failure = False

    async def refresh(self) -> None:
        async with self._lock:  # scrapes at once share one reading
            if self._read_at is not None and self._clock() - self._read_at < PHASE_CACHE_S:
                return
            # Noted before the reading: a Temporal that is down is asked again only after PHASE_CACHE_S.
            self._read_at = self._clock()
            try:
                read = await asyncio.wait_for(self._reader(), PHASE_READ_TIMEOUT_S)
            except Exception as error:  # noqa: BLE001 — whatever Temporal does, the scrape goes on
                self._failures.inc()
                if not self._said_failure:  # once per outage, not once per scrape
                    log.warning("metrics: cannot read workflow phases from Temporal (%s); keeping the last "
                                "figures", type(error).__name__)
                    self._said_failure = True
                return
            self._said_failure = False
            self.figures = {phase: int(read.get(phase, 0)) for phase in PHASES}


def temporal_phases(client: Callable[[], Awaitable[Any]]) -> PhaseReader:
    """A PhaseReader asking Temporal: its running pool workflows (one visibility listing), then each one's
    status query, PHASE_QUERIES at a time; one that does not answer counts as `unknown`."""
    from server.pool_query import pool_status  # the workflow's code only when phases are read

    async def read() -> Mapping[str, int]:
        temporal = await client()
        ids: list[str] = []
        async for execution in temporal.list_workflows(
                "WorkflowType = 'ServiceWorkflow' AND ExecutionStatus = 'Running'"):
            ids.append(execution.id)
            if len(ids) >= MAX_READ_WORKFLOWS:
                break
        limit = asyncio.Semaphore(PHASE_QUERIES)

        async def phase_of(workflow_id: str) -> str:
            async with limit:
                try:
                    status = await pool_status(temporal.get_workflow_handle(workflow_id),
                                               rpc_timeout=timedelta(seconds=PHASE_QUERY_TIMEOUT_S))
                except Exception:  # noqa: BLE001 — a query fails many ways; the workflow still counts
                    return UNKNOWN_PHASE
                return str(status.phase.value)

        counts: dict[str, int] = {}
        for phase in await asyncio.gather(*(phase_of(i) for i in ids)):
            counts[phase] = counts.get(phase, 0) + 1
        return counts

    return read


class StoreFigures(Collector):
    """Copies, nodes and GPUs as the store holds them at the scrape (read in the scrape's thread), and the
    cached phases and blocked copies."""

    def __init__(self, store: Store, phases: PhaseCache, blocked: BlockedCopies) -> None:
        self._store = store
        self._phases = phases
        self._blocked = blocked

    def collect(self) -> Iterable[Metric]:
        workflows = GaugeMetricFamily("berth_workflows", "Running pool workflows by phase (from Temporal, "
                                      f"read at most every {PHASE_CACHE_S:g} s)", labels=("phase",))
        for phase, count in self._phases.figures.items():
            workflows.add_metric((phase,), count)
        yield workflows
        yield self._copies()
        yield GaugeMetricFamily("berth_copies_blocked", "Copies whose latest reserve was refused for want of "
                                "capacity (seen by this API process)", value=self._blocked.count())
        yield from self._nodes()

    def _copies(self) -> Metric:
        published = {r.copy_id: r for r in self._store.replicas()}
        counts = dict.fromkeys(("reserved", "starting", "ready", "draining"), 0)
        for reservation in self._store.placements.reservations():
            replica = published.get(reservation.copy_id)
            if replica is None:
                counts["reserved"] += 1
            elif replica.draining:
                counts["draining"] += 1
            else:
                counts["ready" if replica.ready else "starting"] += 1
        family = GaugeMetricFamily("berth_copies", "Copies holding a placement, by state", labels=("state",))
        for state, count in counts.items():
            family.add_metric((state,), count)
        return family

    def _nodes(self) -> Iterable[Metric]:
        gpus = GaugeMetricFamily("berth_node_gpus", "GPUs per node: reserved (held by a copy, fenced included) "
                                 "or free", labels=("node", "state"))
        nodes = dict.fromkeys(("ready", "draining", "offline"), 0)
        for view in self._store.placements.node_views():
            indexes = {gpu.index for gpu in view.gpus}
            reserved = len(indexes & view.busy_gpus)
            gpus.add_metric((view.id, "reserved"), reserved)
            gpus.add_metric((view.id, "free"), len(indexes) - reserved)
            nodes["offline" if not view.ready else "draining" if view.draining else "ready"] += 1
        yield gpus
        family = GaugeMetricFamily("berth_nodes", "Nodes by state", labels=("state",))
        for state, count in nodes.items():
            family.add_metric((state,), count)
        yield family


class ControlMetrics:
    """The app's registry and what feeds it; the store's placements tell it each decision (`observer`)."""

    def __init__(self, store: Store, phases: PhaseReader) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter("berth_placement_decisions", "Reserve answers, by outcome (placed | blocked)",
                                 ("outcome",), registry=self.registry)
        for outcome in ("placed", "blocked"):
            self.decisions.labels(outcome)
        self.reservation = Histogram("berth_reservation_duration_seconds", "Time of one reserve() (lock wait "
                                     "and transaction)", buckets=RESERVE_BUCKETS, registry=self.registry)
        self.api = Histogram("berth_api_request_duration_seconds", "API request time by route template, "
                             "method and status class", ("route", "method", "code"), buckets=API_BUCKETS,
                             registry=self.registry)
        failures = Counter("berth_workflow_phase_reads_failed", "Readings of workflow phases from Temporal that "
                           "failed or timed out (the last figures stay)", registry=self.registry)
        self.phases = PhaseCache(phases, failures)
        self.blocked = BlockedCopies()
        self.registry.register(StoreFigures(store, self.phases, self.blocked))

    def reserved(self, request: ReserveRequest, result: ReserveResult, seconds: float) -> None:
        self.reservation.observe(seconds)
        if result.placement is None:
            self.decisions.labels("blocked").inc()
            self.blocked.refused(request.copy_id)
        else:
            self.decisions.labels("placed").inc()
            self.blocked.forget(request.copy_id)

    def released(self, copy_id: str) -> None:
        self.blocked.forget(copy_id)


class RequestTimer:
    """Pure ASGI middleware: each HTTP request's time into `histogram`, labelled by the route template
    FastAPI matched (`scope["route"]`), a bounded method and the status class."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the caller sees when the app raised before answering

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.histogram.labels(route_template(scope), method, f"{status // 100}xx").observe(
                time.perf_counter() - started)


def route_template(scope: Scope) -> str:
    """The matched route's path template (`/v1/workflows/{workflow_id}`); a mount's own path (the console's
    static files); else `unmatched`: a made-up path never mints a series."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    for candidate in getattr(getattr(app, "router", None), "routes", ()):
        if isinstance(candidate, Mount) and scope["path"].startswith(candidate.path.rstrip("/") + "/"):
            return candidate.path
    return UNMATCHED


def install(app: FastAPI, context: ServerContext) -> None:
    """Serve the figures on `app` (app.state.metrics, read by server/routes/metrics.py) and time its
    requests; BERTH_METRICS=off installs nothing, so the API pays nothing per request."""
    if not metrics_enabled():
        app.state.metrics = None
        return
    metrics = ControlMetrics(context.store, temporal_phases(context.temporal))
    context.store.placements.observer = metrics
    app.add_middleware(RequestTimer, histogram=metrics.api)  # outermost: the whole request's time
    app.state.metrics = metrics
