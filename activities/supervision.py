"""Supervisor: how a node agent owns rank and service processes for an activity's lifetime, and how a
restarted agent takes back (adopts) the live ones its predecessor left, or stops those nobody claims."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from berth.contracts import MAX_HOLDINGS, NodeHolding
from berth.processes import (
    OwnedProcess,
    group_alive,
    read_pidfile,
    remove_file,
    rewrite_pidfile,
    same_process,
    stop_group,
    supervise,
    tail,
    write_pidfile,
)

HEARTBEAT_EVERY_S = 2.0
STOP_GRACE_S = 10.0
RANK_PIDFILE = "rank.json"  # in the rank's directory
SERVICE_PIDFILE = "service.json"  # in the service's working directory
# Beside a rank's pidfile: its agent stopped it because the agent shut down (`berth down`, SIGTERM). Outlives the
# pidfile, so that a restarted agent asked to adopt the rank can say "interrupted", not "lost", when the
# activity's own result ("agent stopped") could not be recorded (Temporal down at the time).
SHUTDOWN_MARKER = "stopped-by-shutdown.json"
# Where each kind of supervised process keeps its pidfile, under the node's directory.
RANK_PIDFILES = f"ranks/*/{RANK_PIDFILE}"
PIDFILE_PATTERNS = (RANK_PIDFILES, f"services/*/{SERVICE_PIDFILE}")

log = logging.getLogger("berth.node")


class RankState(str, Enum):
    """What a rank this agent supervises is doing: the bounded label set of berth_node_ranks{state}."""

    STARTING = "starting"  # spawned; its copy has not passed wait_ready on this node yet
    RUNNING = "running"  # its copy is ready here (a rank above 0 serves no HTTP: running once spawned)
    UNHEALTHY = "unhealthy"  # its /health probe failed: out of routing until it answers again
    ORPHANED = "orphaned"  # left running by a previous agent, not adopted yet
    ADOPTED = "adopted"  # a previous agent's, taken back by this one
    EXITED = "exited"  # ended during this agent's life: a count that only grows


@dataclass(frozen=True)
class Orphan:
    """A live process a previous agent left running (it died without stopping it)."""

    pidfile: Path
    pid: int
    start_ticks: int | None


@dataclass(frozen=True)
class Adopted:
    """How an adoption ended: `lost` when the process was gone before the agent could take it back."""

    lost: bool
    note: str
    log_tail: str = ""
    interrupted: bool = False  # gone because its agent stopped it on shutdown (see SHUTDOWN_MARKER)


@dataclass
class Supervisor:
    """The processes one node agent owns. Shared by its rank and service activities, so that the orphan
    reaper spares whatever either kind adopted."""

    node_id: str
    node_dir: Path
    adopted: set[Path] = field(default_factory=set)  # pidfiles a restarted agent took back
    # Rank directory name (`<copy>-r<rank>`) → state; read by the metrics server's thread (a copy of it).
    rank_states: dict[str, RankState] = field(default_factory=dict)
    ranks_exited: int = 0

    def rank_started(self, run_dir: Path, rank: int) -> None:
        self.rank_states[run_dir.name] = RankState.STARTING if rank == 0 else RankState.RUNNING

    def rank_ended(self, run_dir: Path) -> None:
        if self.rank_states.pop(run_dir.name, None) is not None:
            self.ranks_exited += 1

    def copy_state(self, copy_id: str, state: RankState) -> None:
        """Set the state of this copy's ranks on this node (wait_ready passed, a /health probe changed)."""
        for name, current in self.rank_states.copy().items():
            if name.startswith(f"{copy_id}-r") and current is not RankState.ORPHANED:
                self.rank_states[name] = state

    def rank_counts(self) -> dict[RankState, int]:
        """Ranks by state, every state present (0 when none): what berth_node_ranks reports."""
        counts = dict.fromkeys(RankState, 0)
        for state in self.rank_states.copy().values():
            counts[state] += 1
        counts[RankState.EXITED] = self.ranks_exited
        return counts

    async def record(self, pidfile: Path, pid: int, **fields: Any) -> None:
        """Write the pidfile a restarted agent adopts from; if it cannot be written, stop the process
        rather than leave it running unsupervised and out of the orphan reaper's sight."""
        try:
            write_pidfile(pidfile, pid, **fields)
        except OSError:
            await stop_group(pid, STOP_GRACE_S)
            raise

    async def watch(self, process: OwnedProcess | int, what: str, *, on_beat: Callable[[int], object] | None = None,
                    before_stop: Callable[[], object] | None = None) -> int | None:
        """Own `process` for the calling activity (see `supervise`): heartbeat while it lives, stop its group
        on cancellation; on worker shutdown stop it and raise AgentStopped."""
        return await supervise(
            process, heartbeat=activity.heartbeat, shutdown=activity.wait_for_worker_shutdown(),
            shutdown_error=lambda: ApplicationError(f"node agent {self.node_id} shut down; {what} was stopped",
                                                    type="AgentStopped"),
            on_beat=on_beat, before_stop=before_stop, every_s=HEARTBEAT_EVERY_S, grace_s=STOP_GRACE_S,
        )

    async def adopt(self, pidfile: Path, what: str, default_log: Path,
                    claimed: Callable[[], Awaitable[object]] | None = None) -> Adopted:
        """Take back a process whose previous agent died: watch the live process its pidfile names until
        it ends, exactly as the activity that started it would, and stop it on cancellation. The process
        is not this agent's child, so its exit status cannot be known: the result says so. `claimed` runs
        once the live process is taken back (to tell its workflow)."""
        self.adopted.add(pidfile)
        marker = pidfile.parent / SHUTDOWN_MARKER
        telling: asyncio.Future[object] | None = None
        try:
            record = read_pidfile(pidfile)
            alive = record is not None and same_process(record["pid"], record.get("start_ticks"))
            stopped_at = None if alive else read_shutdown_marker(marker)
            if stopped_at is not None:
                return Adopted(lost=True, interrupted=True, log_tail=tail(default_log, 15),
                               note=f"its node agent stopped it on shutdown at {_utc(stopped_at)}")
            if record is None:
                return Adopted(lost=True, note="the restarted node agent found no record of its process")
            log_path = Path(record.get("log") or default_log)
            if not alive:
                return Adopted(lost=True, log_tail=tail(log_path, 15),
                               note="its process ended while the node agent was down (exit status unknown)")
            remove_file(marker)  # marked, but its agent died before stopping it: it serves on, adopted
            self._claim(pidfile, record, log_path, what)
            if pidfile.name == RANK_PIDFILE:
                self.rank_states[pidfile.parent.name] = RankState.ADOPTED
            # Beside the watch, not before it: however long the telling takes, the process is watched.
            telling = asyncio.ensure_future(claimed()) if claimed is not None else None
            await self.watch(record["pid"], what)
            return Adopted(lost=False, log_tail=tail(log_path, 15),
                           note="the process was adopted by a restarted node agent, which is not its parent")
        finally:
            if telling is not None:
                telling.cancel()
            remove_file(pidfile)
            remove_file(marker)
            self.adopted.discard(pidfile)
            if pidfile.name == RANK_PIDFILE:
                self.rank_ended(pidfile.parent)

    def _claim(self, pidfile: Path, record: dict[str, Any], log_path: Path, what: str) -> None:
        """Say in the record and in the process's log that this agent now owns it."""
        record.update({"adopted_by": os.getpid(), "adopted_at": time.time()})
        rewrite_pidfile(pidfile, record)
        with contextlib.suppress(OSError), open(log_path, "ab", buffering=0) as handle:
            handle.write(f"[berth] node {self.node_id}: restarted agent adopted {what} "
                         f"(pid {record['pid']})\n".encode())

    def find_orphans(self) -> list[Orphan]:
        """Live processes (ranks, services) a previous agent left running; records of gone ones are removed."""
        orphans = []
        for pattern in PIDFILE_PATTERNS:
            for pidfile in sorted(self.node_dir.glob(pattern)):
                record = read_pidfile(pidfile)
                if record is not None and same_process(record["pid"], record.get("start_ticks")):
                    orphans.append(Orphan(pidfile, record["pid"], record.get("start_ticks")))
                    if pidfile.name == RANK_PIDFILE:
                        self.rank_states[pidfile.parent.name] = RankState.ORPHANED
                else:
                    remove_file(pidfile)
        return orphans

    def holdings(self) -> list[NodeHolding]:
        """What each live rank process on this node holds (GPUs, ports), its own or an orphan: the node's
        heartbeat reports it, so the store frees a lost rank's reservation only once it is gone."""
        held = []
        for pidfile in sorted(self.node_dir.glob(f"ranks/*/{RANK_PIDFILE}"))[:MAX_HOLDINGS]:
            record = read_pidfile(pidfile)
            spec = (record or {}).get("spec")
            if record is None or not isinstance(spec, dict) or not same_process(record["pid"],
                                                                                record.get("start_ticks")):
                continue
            ports = [spec["port"]]
            if spec.get("rank") == 0 and spec.get("nnodes", 1) > 1:
                ports.append(spec["master_port"])
            held.append(NodeHolding(owner=spec["copy_id"], gpus=tuple(spec.get("gpus", ())), ports=tuple(ports)))
        return held

    async def stop_unadopted(self, orphans: list[Orphan]) -> None:
        """Stop every orphan nobody adopted: a rank nobody watches must not serve on as half of a copy, nor a
        service on a port its workflow has given up."""
        for orphan in orphans:
            if orphan.pidfile in self.adopted:
                continue
            record = read_pidfile(orphan.pidfile)
            ours = record is not None and record["pid"] == orphan.pid
            # Record gone: adopted, and ended with its adopter. Record replaced (a service started again in
            # the same directory): the orphan, if it still runs, is nobody's.
            if not ours and not same_process(orphan.pid, orphan.start_ticks):
                continue
            if group_alive(orphan.pid):
                log.warning("stopping orphaned process group %s (%s): nobody adopted it", orphan.pid,
                            orphan.pidfile.parent.name)
                await stop_group(orphan.pid, STOP_GRACE_S)
            if ours:
                remove_file(orphan.pidfile)
            if orphan.pidfile.name == RANK_PIDFILE:
                self.rank_ended(orphan.pidfile.parent)

    def mark_shutdown(self) -> list[Path]:
        """Before a shutting-down agent stops its ranks: mark each live one as stopped by shutdown
        (SHUTDOWN_MARKER). Returns the rank directories marked."""
        marked = []
        for pidfile in sorted(self.node_dir.glob(RANK_PIDFILES)):
            record = read_pidfile(pidfile)
            if record is not None and same_process(record["pid"], record.get("start_ticks")):
                with contextlib.suppress(OSError):  # unmarked, the rank is only reported lost
                    write_shutdown_marker(pidfile.parent / SHUTDOWN_MARKER)
                    marked.append(pidfile.parent)
        return marked

    def shutdown_marked(self) -> list[Path]:
        """The rank directories a previous agent marked on shutdown: kept until their workflows asked."""
        return sorted(marker.parent for marker in self.node_dir.glob(f"ranks/*/{SHUTDOWN_MARKER}"))

    def drop_unclaimed_markers(self, marked: list[Path]) -> None:
        """Once the adopt window has passed: the markers nobody asked for (the stop was recorded after
        all, or the workflow ended meanwhile) are of no further use."""
        for directory in marked:
            remove_file(directory / SHUTDOWN_MARKER)


def write_shutdown_marker(path: Path) -> None:
    path.write_text(json.dumps({"stopped_by": "shutdown", "at": time.time(), "agent_pid": os.getpid()}))


def read_shutdown_marker(path: Path) -> float | None:
    """When the marker says its rank was stopped by its agent's shutdown, or None without one."""
    try:
        found = json.loads(path.read_text())
        return float(found["at"]) if found.get("stopped_by") == "shutdown" else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _utc(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))
