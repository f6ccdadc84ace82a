"""What Slurm's commands print, read into typed records: a queued job (`squeue`), a finished one (`sacct`), a node
(`scontrol show node --oneliner`). Pure: the commands are run by berth/slurm/commands.py."""

from __future__ import annotations

import re
from dataclasses import dataclass

# `squeue -o` / `sacct -o` fields, separated by a character no Slurm name or reason contains.
SEPARATOR = "|"
QUEUE_FORMAT = SEPARATOR.join(("%i", "%j", "%T", "%r", "%N", "%D", "%B"))
ACCOUNTING_FIELDS = ("JobID", "JobName", "State", "ExitCode", "NodeList", "Start", "End")
# Job states Slurm may still change (squeue's own list); every other state is final.
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING",
                            "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING"})


@dataclass(frozen=True)
class QueuedJob:
    """One job as `squeue` shows it."""

    job_id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, …
    reason: str  # why it waits (Resources, Priority, QOSMaxGRESPerUser, …); "None" while it runs
    nodes: str  # Slurm's compressed node list, e.g. n[1-2]; empty while pending
    node_count: int
    batch_host: str  # the node the batch script runs on (rank 0's)

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES


@dataclass(frozen=True)
class FinishedJob:
    """One job as `sacct` recorded it when it ended."""

    job_id: int
    name: str
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, …
    exit_status: int  # the batch script's exit status (the first rank to fail ends it: --kill-on-bad-exit)
    signal: int  # the signal that ended it, 0: none
    nodes: str
    start: str
    end: str

    @property
    def ended(self) -> bool:
        """Whether the record says the job ended: a final state (none Slurm may still change) and an end time."""
        final = self.state not in PENDING_STATES and self.state not in RUNNING_STATES
        return final and self.end not in ("", "Unknown", "None")


def parse_queue(text: str) -> list[QueuedJob]:
    """`squeue -h -o QUEUE_FORMAT` lines; a line of another shape is skipped (never guessed at)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split(SEPARATOR)
        if len(parts) != 7 or not parts[0].isdigit():
            continue
        job_id, name, state, reason, nodes, count, batch_host = parts
        jobs.append(QueuedJob(job_id=int(job_id), name=name, state=state.split()[0], reason=reason,
                              nodes=nodes, node_count=int(count) if count.isdigit() else 0,
                              batch_host="" if batch_host in ("n/a", "(null)") else batch_host))
    return jobs


def parse_accounting(text: str) -> list[FinishedJob]:
    """`sacct -P -n -o ACCOUNTING_FIELDS` lines for whole jobs (a step's `123.0` lines are skipped). State may read
    `CANCELLED by 0`: its first word is the state."""
    jobs = []
    for line in text.splitlines():
        parts = line.split(SEPARATOR)
        if len(parts) != len(ACCOUNTING_FIELDS) or not parts[0].isdigit():
            continue
        job_id, name, state, exit_code, nodes, start, end = parts
        status, _, signal = exit_code.partition(":")
        jobs.append(FinishedJob(job_id=int(job_id), name=name, state=state.split()[0] if state else "UNKNOWN",
                                exit_status=int(status) if status.isdigit() else -1,
                                signal=int(signal) if signal.isdigit() else 0, nodes=nodes, start=start, end=end))
    return jobs


_FIELD = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class SlurmNode:
    """One node as `scontrol show node --oneliner` shows it."""

    name: str
    address: str  # NodeAddr: how other hosts reach it
    hostname: str  # NodeHostName
    state: str  # IDLE, MIXED, ALLOCATED, DOWN+DRAIN, …
    partitions: tuple[str, ...]
    gres: str  # e.g. gpu:a100:4
    cpus: int
    memory_mb: int

    @property
    def gpus(self) -> int:
        """GPUs its Gres names (gpu:N or gpu:TYPE:N, several comma-separated)."""
        total = 0
        for part in self.gres.split(","):
            words = part.split("(")[0].split(":")
            if words[0] == "gpu" and words[-1].isdigit():
                total += int(words[-1])
        return total


def parse_nodes(text: str) -> list[SlurmNode]:
    nodes = []
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "NodeName" not in fields:
            continue
        nodes.append(SlurmNode(
            name=fields["NodeName"], address=fields.get("NodeAddr", ""), hostname=fields.get("NodeHostName", ""),
            state=fields.get("State", "UNKNOWN"),
            partitions=tuple(p for p in fields.get("Partitions", "").split(",") if p),
            gres="" if fields.get("Gres", "(null)") == "(null)" else fields.get("Gres", ""),
            cpus=int(fields.get("CPUTot", "0") or 0) if fields.get("CPUTot", "0").isdigit() else 0,
            memory_mb=int(fields["RealMemory"]) if fields.get("RealMemory", "").isdigit() else 0))
    return nodes
