"""FakeSlurm: the control worker's Slurm activities (activities/slurm_copies.py) mocked under their real names, over
jobs the test holds pending, starts, ends or watches being cancelled; every call recorded."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import CopyInput, HealthCheck, RankExit
from workflows.slurm_payloads import SlurmCopyEnd, SlurmJobRef, SlurmJobView, SlurmReadyCheck, SlurmStartWait

HEARTBEAT_EVERY_S = 0.1


@dataclass
class FakeJob:
    ref: SlurmJobRef
    nodes: int
    state: str = "PENDING"
    reason: str = "Resources"
    end: SlurmCopyEnd | None = None  # set: the job has ended so (watch returns it)


@dataclass
class FakeSlurm:
    start_at_once: bool = False  # jobs run as soon as submitted (no pending)
    refuse: str | None = None  # sbatch refuses every job with this line
    jobs: dict[str, FakeJob] = field(default_factory=dict)  # by copy id
    hung: dict[str, str] = field(default_factory=dict)  # copy id → why its engine's /health stopped answering
    calls: list[tuple[str, Any]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def called(self, name: str) -> list[Any]:
        return [argument for called, argument in self.calls if called == name]

    def run(self, copy_id: str) -> None:
        """The job leaves the queue's wait and its ranks start, one per node."""
        self.jobs[copy_id].state, self.jobs[copy_id].reason = "RUNNING", ""

    def fail(self, copy_id: str, rank: int, node: str, exit_code: int) -> None:
        """A rank dies: --kill-on-bad-exit ends the job, sacct says FAILED."""
        job = self.jobs[copy_id]
        job.state = "FAILED"
        job.end = SlurmCopyEnd(state="FAILED", message=f"Slurm job {job.ref.job_id} ended FAILED",
                               failure=RankExit(rank=rank, node_id=node, exit_code=exit_code, note="Exited with "
                                                f"exit code {exit_code}"))

    @implements(stubs.submit_slurm_copy)
    async def submit_slurm_copy(self, copy: CopyInput) -> SlurmJobRef:
        self.calls.append(("submit_slurm_copy", copy))
        if self.refuse:
            raise ApplicationError(self.refuse, type="SlurmRefused", non_retryable=True)
        if copy.copy_id in self.jobs and self.jobs[copy.copy_id].end is None:
            return self.jobs[copy.copy_id].ref.model_copy(update={"adopted": True})
        ref = SlurmJobRef(copy_id=copy.copy_id, job_id=next(self._ids), job_dir=f"/shared/jobs/{copy.copy_id}")
        self.jobs[copy.copy_id] = FakeJob(ref=ref, nodes=copy.nodes)
        if self.start_at_once:
            self.run(copy.copy_id)
        return ref

    def _view(self, ref: SlurmJobRef) -> SlurmJobView:
        job = self.jobs[ref.copy_id]
        running = job.state == "RUNNING"
        nodes = tuple(f"sn{i}" for i in range(job.nodes)) if running else ()
        return SlurmJobView(state=job.state, reason=job.reason, nodes=nodes,
                            url=f"http://sn0:{20000 + ref.job_id}" if running else None,
                            ranks_reported=len(nodes))

    @implements(stubs.slurm_copy_state)
    async def slurm_copy_state(self, job: SlurmJobRef) -> SlurmJobView:
        self.calls.append(("slurm_copy_state", job))
        return self._view(job)

    @implements(stubs.wait_slurm_copy_started)
    async def wait_slurm_copy_started(self, wait: SlurmStartWait) -> SlurmJobView:
        self.calls.append(("wait_slurm_copy_started", wait))
        while (view := self._view(wait.job)).pending and view.reason == wait.told:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_S)
        return view

    @implements(stubs.wait_slurm_copy_ready)
    async def wait_slurm_copy_ready(self, check: SlurmReadyCheck) -> SlurmJobView:
        self.calls.append(("wait_slurm_copy_ready", check))
        while (view := self._view(check.job)).ranks_reported < check.nodes:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_S)
        return view

    @implements(stubs.watch_slurm_copy)
    async def watch_slurm_copy(self, job: SlurmJobRef) -> SlurmCopyEnd:
        self.calls.append(("watch_slurm_copy", job))
        while (end := self.jobs[job.copy_id].end) is None:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_S)
        return end

    @implements(stubs.watch_slurm_copy_health)
    async def watch_slurm_copy_health(self, check: HealthCheck) -> str:
        self.calls.append(("watch_slurm_copy_health", check))
        while check.copy_id not in self.hung:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_S)
        return self.hung[check.copy_id]

    @implements(stubs.cancel_slurm_copy)
    async def cancel_slurm_copy(self, job: SlurmJobRef) -> None:
        self.calls.append(("cancel_slurm_copy", job))
        fake = self.jobs[job.copy_id]
        if fake.end is None:
            fake.state = "CANCELLED"
            fake.end = SlurmCopyEnd(state="CANCELLED", message=f"Slurm job {job.job_id} ended CANCELLED")

    def activities(self) -> list[Callable[..., Any]]:
        return [self.submit_slurm_copy, self.slurm_copy_state, self.wait_slurm_copy_started,
                self.wait_slurm_copy_ready, self.watch_slurm_copy, self.watch_slurm_copy_health, self.cancel_slurm_copy]
