"""How the control worker waits for a submitted Slurm job to start (activities/slurm_copies.py,
`wait_slurm_copy_started`), over a scripted squeue and a job directory in tmp: no cluster. A rank's report in the
job directory ends the wait without waiting for the next squeue; Slurm's "None" (its scheduler has not looked at
the job yet) is not told as a pending reason; a real reason is told at once, and the next wait lasts until it
changes; squeue is asked with a growing interval, never more than a few times a second."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities import slurm_copies
from activities.slurm_copies import SlurmCopyActivities
from berth.security import ReplicaKeys
from berth.settings.slurm import SlurmSettings
from berth.slurm.records import QueuedJob
from workflows.slurm_payloads import SlurmJobRef, SlurmStartWait

pytestmark = pytest.mark.timeout(30)


@dataclass
class ScriptedQueue:
    """squeue's answers, one per call, the last one repeated; when each call came."""

    answers: list[tuple[str, str]]  # (state, reason)
    settings: SlurmSettings = field(default_factory=lambda: SlurmSettings.model_validate({}))
    at: list[float] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.at)

    async def queue(self, job_ids: list[int] = (), name_prefix: str = "") -> list[QueuedJob]:  # type: ignore[assignment]
        state, reason = self.answers[min(self.calls, len(self.answers) - 1)]
        self.at.append(time.monotonic())
        return [QueuedJob(job_id=7, name="berth-c", state=state, reason=reason, nodes="", node_count=1,
                          batch_host="")]


def _activities(queue: ScriptedQueue, tmp_path: Path) -> SlurmCopyActivities:
    return SlurmCopyActivities(queue, ReplicaKeys.load_or_create(tmp_path / "keys"), ["engine"],  # type: ignore[arg-type]
                               ["launcher"], {})


def _job(tmp_path: Path) -> SlurmJobRef:
    (tmp_path / "job").mkdir()
    return SlurmJobRef(copy_id="c", job_id=7, job_dir=str(tmp_path / "job"))


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within 10 s"
        await asyncio.sleep(0.005)


def _looks(monkeypatch: pytest.MonkeyPatch, first_s: float, most_s: float) -> None:
    monkeypatch.setattr(slurm_copies, "FIRST_LOOK_S", first_s)
    monkeypatch.setattr(slurm_copies, "MAX_PENDING_LOOK_S", most_s)


async def test_a_ranks_report_ends_the_wait_without_waiting_for_the_next_squeue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _looks(monkeypatch, 60, 60)  # the next squeue would be a minute away: only the report can end the wait
    queue = ScriptedQueue([("PENDING", "None"), ("RUNNING", "None")])
    job = _job(tmp_path)
    looked: list[Path] = []  # the report wait's looks: the report is written once it waits for one, not while
    any_reported = slurm_copies._any_rank_reported  # the first squeue's own look at the job directory may still run

    def counted(job_dir: Path) -> bool:
        looked.append(job_dir)
        return any_reported(job_dir)

    monkeypatch.setattr(slurm_copies, "_any_rank_reported", counted)
    waiting = asyncio.ensure_future(ActivityEnvironment().run(
        _activities(queue, tmp_path).wait_slurm_copy_started, SlurmStartWait(job=job)))
    await _until(lambda: queue.calls == 1 and bool(looked), "first squeue, then a look for a report")
    assert not waiting.done()  # "None": Slurm has not looked at the job yet, nothing to tell the pool
    (Path(job.job_dir) / "rank-0.json").write_text(json.dumps({"rank": 0, "node": "n1"}))
    view = await asyncio.wait_for(waiting, 10)
    assert queue.calls == 2 and view.state == "RUNNING" and view.ranks_reported == 1


async def test_a_reason_is_told_at_once_and_the_next_wait_lasts_until_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _looks(monkeypatch, 0.01, 0.04)
    queue = ScriptedQueue([("PENDING", "Resources")] * 6 + [("PENDING", "Priority")] * 3 + [("RUNNING", "None")])
    slurm, job, env = _activities(queue, tmp_path), _job(tmp_path), ActivityEnvironment()
    told = await env.run(slurm.wait_slurm_copy_started, SlurmStartWait(job=job))
    assert (told.state, told.reason, queue.calls) == ("PENDING", "Resources", 1)
    changed = await env.run(slurm.wait_slurm_copy_started, SlurmStartWait(job=job, told="Resources"))
    assert (changed.reason, queue.calls) == ("Priority", 7)
    started = await env.run(slurm.wait_slurm_copy_started, SlurmStartWait(job=job, told="Priority"))
    assert started.state == "RUNNING" and not started.pending and queue.calls == 10


@pytest.mark.parametrize("stale_report", [False, True])
async def test_squeue_is_asked_less_and_less_often_while_the_job_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale_report: bool) -> None:
    """A requeued job's report of its last run does not make it started, nor squeue asked at every report look."""
    _looks(monkeypatch, 0.02, 0.08)
    queue, job = ScriptedQueue([("PENDING", "BeginTime")]), _job(tmp_path)
    if stale_report:
        (Path(job.job_dir) / "rank-0.json").write_text(json.dumps({"rank": 0, "node": "n1"}))
    waiting = asyncio.ensure_future(ActivityEnvironment().run(
        _activities(queue, tmp_path).wait_slurm_copy_started, SlurmStartWait(job=job, told="BeginTime")))
    await _until(lambda: queue.calls >= 6, "six looks")
    assert not waiting.done()
    waiting.cancel()
    gaps = [later - earlier for earlier, later in zip(queue.at, queue.at[1:], strict=False)]
    for gap, least in zip(gaps, (0.02, 0.04, 0.08, 0.08, 0.08), strict=False):
        assert gap >= least * 0.95, gaps
