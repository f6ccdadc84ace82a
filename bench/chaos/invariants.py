"""The soak's invariants, checked about once a second while the chaos runs, and the orphan count after
`berth down`. Each check reads only what the stack exposes: the API (as the stack's admin) and /proc.

- a GPU reserved twice: two live rank processes on one node whose CUDA_VISIBLE_DEVICES overlap (from
  /proc/<pid>/environ of processes running in the node's ranks/ dir), or a live rank on a GPU the API
  has allocated to another copy (seen in two API reads around the /proc scan, so no race counts);
- a copy lost without an event: a copy that left the workflow's replicas with no event ending it;
- a workflow failed: phase `failed`.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from stack.driver import process_environment

# Events that say a copy ended (or is ending); the workflow's own `failed`/`stopped` cover all its copies.
COPY_END_KINDS = frozenset({"copy_stopping", "copy_interrupted", "copy_failed", "copy_drained", "copy_dropped",
                            "copy_replaced"})
WORKFLOW_END_KINDS = frozenset({"failed", "stopped"})
# The copy's state is signalled before its event: a vanished copy gets this long for the event to show.
EVENT_GRACE_S = 30.0

GpuKey = tuple[str, int]  # (node id, GPU index)


@dataclass
class InvariantMonitor:
    state_dir: Path
    api_url: str
    token: str
    workflow_ids: list[str]
    double_reserved: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed_workflows: set[str] = field(default_factory=set)
    lost_copies: list[dict[str, Any]] = field(default_factory=list)
    ticks: int = 0
    # What the checks saw, so a check that never looked at anything shows as such.
    most_rank_processes: int = 0
    most_gpus_allocated: int = 0
    api_unavailable_ticks: int = 0

    def __post_init__(self) -> None:
        self._client = httpx.Client(base_url=self.api_url, timeout=5.0,
                                    headers={"Authorization": f"Bearer {self.token}"})
        self._known: dict[str, set[str]] = {w: set() for w in self.workflow_ids}
        self._every_copy: set[str] = set()
        self._vanished: dict[tuple[str, str], float] = {}  # (workflow, copy) → when it was last seen
        # The latest tick's reads (empty when the API did not answer): what the soak's recovery check reads.
        self.nodes: list[dict[str, Any]] = []
        self.described: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        self._client.close()

    # --- one tick -----------------------------------------------------------------------------------
    def check(self) -> None:
        self.ticks += 1
        try:
            before = self._allocations()
            ranks = rank_processes(self.state_dir)
            after = self._allocations()
            described = {w: self._client.get(f"/v1/workflows/{w}").json() for w in self.workflow_ids}
        except (httpx.HTTPError, ValueError):
            self.api_unavailable_ticks += 1  # a killed API or Temporal: the next tick looks again
            self.nodes, self.described = [], {}
            self._check_processes(rank_processes(self.state_dir), {}, {})
            return
        self.described = described
        self._check_processes(ranks, before, after)
        self.most_rank_processes = max(self.most_rank_processes, len(ranks))
        self.most_gpus_allocated = max(self.most_gpus_allocated, len(after))
        for workflow_id, info in described.items():
            self._check_workflow(workflow_id, info)

    def _allocations(self) -> dict[GpuKey, str]:
        response = self._client.get("/v1/nodes")
        response.raise_for_status()
        self.nodes = response.json()
        return {(node["id"], int(gpu["index"])): gpu["allocated_to"]
                for node in self.nodes for gpu in node["gpus"] if gpu.get("allocated_to")}

    def _check_processes(self, ranks: list[RankProcess], before: dict[GpuKey, str], after: dict[GpuKey, str]) -> None:
        holders: dict[GpuKey, set[str]] = {}
        for rank in ranks:
            for gpu in rank.gpus:
                holders.setdefault((rank.node_id, gpu), set()).add(rank.rank_dir)
        for key, dirs in holders.items():
            if len(dirs) > 1:
                self._flag(key, "two live ranks share the GPU", sorted(dirs))
            copies = {d.rsplit("-r", 1)[0] for d in dirs}
            reserved = before.get(key)
            if reserved is not None and reserved == after.get(key) and reserved not in copies:
                self._flag(key, f"a live rank runs on a GPU the API reserved for {reserved}", sorted(dirs))

    def _flag(self, key: GpuKey, why: str, holders: list[str]) -> None:
        name = f"{key[0]}/gpu{key[1]}"
        if name not in self.double_reserved:
            self.double_reserved[name] = {"why": why, "holders": holders, "at": round(time.time(), 1)}
            print(f"chaos invariant: GPU reserved twice: {name}: {why}: {holders}", flush=True)

    def _check_workflow(self, workflow_id: str, info: dict[str, Any]) -> None:
        if info.get("phase") == "failed" and workflow_id not in self.failed_workflows:
            self.failed_workflows.add(workflow_id)
            print(f"chaos invariant: workflow failed: {workflow_id}: {info.get('last_error')}", flush=True)
        now = time.monotonic()
        present = {r["copy_id"] for r in info.get("replicas", [])}
        for copy_id in self._known[workflow_id] - present:
            self._vanished.setdefault((workflow_id, copy_id), now)
        self._known[workflow_id] |= present
        self._every_copy |= present
        for key in [k for k in self._vanished if k[0] == workflow_id]:
            if key[1] in present:  # it came back (a copy workflow re-signalled its state)
                del self._vanished[key]
            elif ended_by_event(info.get("events", []), key[1]):
                del self._vanished[key]
                self._known[workflow_id].discard(key[1])
            elif now - self._vanished[key] > EVENT_GRACE_S:
                self._lost(key, info)

    def _lost(self, key: tuple[str, str], info: dict[str, Any]) -> None:
        del self._vanished[key]
        self._known[key[0]].discard(key[1])
        self.lost_copies.append({"workflow_id": key[0], "copy_id": key[1], "phase": info.get("phase")})
        print(f"chaos invariant: copy lost without an event: {key[1]}", flush=True)

    def finish(self) -> None:
        """At the end of the soak: a copy still waiting for its event is lost unless it shows now."""
        deadline = time.monotonic() + EVENT_GRACE_S
        while self._vanished and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                for workflow_id in {k[0] for k in self._vanished}:
                    self._check_workflow(workflow_id, self._client.get(f"/v1/workflows/{workflow_id}").json())
            time.sleep(1)
        for key in list(self._vanished):
            self._lost(key, {"phase": "unknown"})

    def summary(self) -> dict[str, Any]:
        return {"gpus_reserved_twice": len(self.double_reserved), "gpus_reserved_twice_detail": self.double_reserved,
                "copies_lost_without_event": len(self.lost_copies), "copies_lost_detail": self.lost_copies,
                "workflows_failed": len(self.failed_workflows), "failed_workflow_ids": sorted(self.failed_workflows),
                "copies_seen": len(self._every_copy), "most_rank_processes_seen": self.most_rank_processes,
                "most_gpus_allocated_seen": self.most_gpus_allocated,
                "invariant_ticks": self.ticks, "ticks_api_unavailable": self.api_unavailable_ticks}


def ended_by_event(events: list[dict[str, Any]], copy_id: str) -> bool:
    return any((e.get("copy_id") == copy_id and e.get("kind") in COPY_END_KINDS)
               or e.get("kind") in WORKFLOW_END_KINDS for e in events)


# --- /proc ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankProcess:
    pid: int
    node_id: str
    rank_dir: str  # <copy id>-r<rank>
    gpus: tuple[int, ...]


def rank_processes(state_dir: Path) -> list[RankProcess]:
    """Live processes running in a node's ranks/<copy>-r<rank>/ dir, with the GPUs they were given."""
    nodes = (state_dir / "nodes").resolve()
    found = []
    for pid in _pids():
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            relative = cwd.relative_to(nodes).parts
        except (OSError, ValueError):
            continue
        if len(relative) != 3 or relative[1] != "ranks" or _zombie(pid):
            continue
        try:
            devices = process_environment(pid).get("CUDA_VISIBLE_DEVICES", "")
        except OSError:
            continue
        gpus = tuple(int(d) for d in devices.split(",") if d.strip().isdigit())
        found.append(RankProcess(pid, relative[0], relative[2], gpus))
    return found


def processes_under(state_dir: Path) -> list[str]:
    """Live processes whose cwd or command line is under the state dir: orphans once the stack is down."""
    root = str(state_dir.resolve())
    found = []
    for pid in _pids():
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = ""
            with contextlib.suppress(OSError):  # another user's process: its command line still counts
                cwd = os.readlink(f"/proc/{pid}/cwd")
            if not _zombie(pid) and (cwd.startswith(root) or root in cmdline):
                found.append(f"{pid}: {cmdline.strip()[:300]}")
    return found


def _pids() -> list[int]:
    own = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != own]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
