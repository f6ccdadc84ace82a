"""Payloads of a copy placed as a Slurm job (issue 35), between SlurmCopyWorkflow and the control worker's Slurm
activities (activities/slurm_copies.py)."""

from __future__ import annotations

from workflows.payloads import Payload, RankExit


class SlurmJobRef(Payload):
    """The job a copy is: Slurm's id and the job directory on the shared filesystem."""

    copy_id: str
    job_id: int
    job_dir: str
    adopted: bool = False  # a job already queued under the copy's name was taken back, not a second one submitted


class SlurmJobView(Payload):
    """The job as Slurm and its ranks show it now."""

    state: str  # Slurm's (PENDING, RUNNING, …; GONE: squeue lists it no more)
    reason: str = ""  # why it waits (Resources, Priority, QOSMaxGRESPerUser, …)
    nodes: tuple[str, ...] = ()  # the Slurm nodes its ranks reported from, rank order
    url: str | None = None  # rank 0's engine, once it named its address
    ranks_reported: int = 0  # ranks that started on a node of their own (a node counted once)

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING", "REQUEUED", "SUSPENDED")

    @property
    def ended(self) -> bool:
        return not self.pending and self.state not in ("RUNNING", "COMPLETING")


class SlurmStartWait(Payload):
    """Wait while the job is pending for the reason the pool was last told (`told`; None: none told yet)."""

    job: SlurmJobRef
    told: str | None = None


class SlurmReadyCheck(Payload):
    """Rank 0 at `url` serves the copy's model with every rank running on a node of its own."""

    job: SlurmJobRef
    url: str
    model_id: str
    nodes: int
    timeout_s: float = 1800


class SlurmCopyEnd(Payload):
    """How the job ended: Slurm's state and, where Slurm said it, the rank and node that ended it."""

    state: str
    failure: RankExit | None = None
    message: str = ""
