"""The control worker's side of copies placed as Slurm jobs (issue 35): submit a copy's job (or take back the one
already queued under its name), read its state and its ranks' reports, wait until rank 0 serves with every rank on
a node of its own, watch it until it ends and say how, and cancel it until `squeue` lists it no more.

The worker runs on a host where Slurm's client commands work (a login or service node) and reaches the job
directories on the shared filesystem. Nothing it hands a job carries a Berth credential: the copy's key goes into
a 0600 file of the job directory (activities/slurm_job_files.py)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

import rank
from activities.health import until_hung
from activities.rank_identities import RankIdentities
from activities.rank_jail import usable_rank_user
from activities.ranks import engine_command
from activities.slurm_jail import jail_plan
from activities.slurm_job_files import engine_environment_for, job_description, rank_argvs, write_job_dir
from activities.vllm_command import engine_defaults
from berth.child_environment import engine_environment
from berth.processes import tail
from berth.security import ReplicaKeys
from berth.settings import rank_user_setting
from berth.settings.slurm import SlurmSettings
from berth.slurm.commands import SlurmCommands, SlurmRefused
from berth.slurm.job_script import CopyJob, job_name, launcher_argv, render
from berth.tls_client import url_context
from catalog.definition import SlurmPick
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import CopyInput, HealthCheck, RankExit
from workflows.slurm_payloads import SlurmCopyEnd, SlurmJobRef, SlurmJobView, SlurmReadyCheck, SlurmStartWait

POLL_S = 1.0  # squeue at most this often per copy: a cluster's controller serves every user's commands
# A job just submitted: squeue again after FIRST_LOOK_S, then twice as long each time up to MAX_PENDING_LOOK_S (a
# job on an idle partition starts within a second; one that waits may wait for hours). Between two looks the job
# directory is checked every REPORT_LOOK_S: a rank's report there means the job runs, and costs the controller
# nothing (squeue is a process and a controller RPC; a shared filesystem may show the report late, squeue not).
# The waits are here, in the activity, not workflow timers: a Temporal timer fired ~1 s late (docs/performance.md).
FIRST_LOOK_S, MAX_PENDING_LOOK_S, REPORT_LOOK_S = 0.25, 5.0, 0.05
# Slurm's pending reason before its scheduler has looked at a job at all: no reason to tell the pool, unless the
# job keeps it this long (a pool told "pending: None" for a job that starts a moment later learns nothing).
NOT_LOOKED_AT, NOT_LOOKED_AT_S = "None", 3.0
RECORD_WAIT_S = 30.0  # sacct may record an ended job a moment after squeue stops listing it
RANK_SCHEME = "http"  # how rank 0's engine serves (the routing table's url); only Berth's key gets an answer
# srun's own line for the task that ended the job (--kill-on-bad-exit): "srun: error: n2: task 1: Killed".
_SRUN_TASK = re.compile(r"srun: error: (?P<node>[^:\s]+): tasks? (?P<rank>\d+)(?:-\d+)?: (?P<what>.+)")
_EXIT_STATUS = re.compile(r"Exited with exit code (\d+)")
_SIGNALS = {"Killed": 9, "Terminated": 15, "Aborted": 6, "Segmentation fault": 11, "Hangup": 1, "Interrupt": 2}


def read_reports(job_dir: Path) -> tuple[dict[str, object] | None, list[dict[str, object]]]:
    """rank 0's `leader.json` and every rank's `rank-R.json` (rank order); blocking file reads."""
    leader_path = job_dir / "leader.json"
    leader = json.loads(leader_path.read_text()) if leader_path.exists() else None
    ranks = sorted((json.loads(p.read_text()) for p in job_dir.glob("rank-*.json")), key=lambda r: int(r["rank"]))
    return leader, ranks


def failed_rank(output: str) -> RankExit | None:
    """The rank srun says ended the job, from the job's output; None: srun said none."""
    for line in reversed(output.splitlines()):
        found = _SRUN_TASK.search(line)
        if found:
            what = found["what"].strip()
            code = _EXIT_STATUS.search(what)
            return RankExit(rank=int(found["rank"]), node_id=found["node"], reason="exited",
                            exit_code=int(code[1]) if code else None, signal=_SIGNALS.get(what),
                            signal_name=what if what in _SIGNALS else "", note=what)
    return None


class SlurmCopyActivities:
    def __init__(self, commands: SlurmCommands, replica_keys: ReplicaKeys, engine_command: Sequence[str],
                 launcher: Sequence[str], inherited: Mapping[str, str], rank_user_name: str = "none",
                 secret_dirs: Sequence[Path] = ()) -> None:
        self.commands = commands
        self.replica_keys = replica_keys
        self.engine_command = list(engine_command)
        self.launcher = tuple(launcher)
        self.inherited = dict(inherited)  # what a job may inherit: allow-listed by the caller, no credential
        self.rank_user_name = rank_user_name  # BERTH_RANK_USER: whom a root worker's jobs start ranks as
        self.secret_dirs = tuple(secret_dirs)  # hidden from the ranks (the worker's state dir)
        self._rank_users: RankIdentities | None = None
        self._decided = False  # whether the jail works here: decided at the first submission

    async def _jail_users(self) -> RankIdentities | None:
        """Whom jobs' ranks run as, each workflow a uid of its own (activities/rank_identities.py): decided once, at
        the first job (a worker on a cluster of Berth's own nodes never creates the rank user)."""
        if not self._decided:
            base = await asyncio.to_thread(usable_rank_user, self.rank_user_name, "the control worker")
            if base is not None:
                # Beside the worker's state (hidden from every job), else in the root-only jobs directory.
                self._rank_users = RankIdentities(base, self.secret_dirs[0] if self.secret_dirs else
                                                  Path(self.commands.settings.shared_dir) / "jobs")
            self._decided = True
        return self._rank_users

    def _job_dir(self, copy_id: str) -> Path:
        shared = self.commands.settings.shared_dir
        if not shared:
            raise ApplicationError("The Slurm backend needs the `slurm.shared_dir` setting: a directory every node "
                                   "mounts at the same path.", type="SlurmNotConfigured", non_retryable=True)
        return Path(shared) / "jobs" / copy_id

    def _picked(self, copy: CopyInput) -> SlurmPick:
        """The values' partition, account and time limit, checked again against the cluster's settings: they may
        have changed since the workflow was submitted (then the copy fails with the line, as a refused sbatch)."""
        pick = copy.slurm or SlurmPick()
        refusal = self.commands.settings.pick_refusal(pick.partition, pick.account, pick.time_limit)
        if refusal is not None:
            raise ApplicationError(refusal, type="SlurmRefused", non_retryable=True)
        return pick

    @implements(stubs.submit_slurm_copy)
    async def submit_slurm_copy(self, copy: CopyInput) -> SlurmJobRef:
        job_dir = self._job_dir(copy.copy_id)
        name = job_name(copy.copy_id)
        # An attempt that submitted and then lost its answer: the job is queued under the copy's name; take it
        # back rather than submit a second one. So does a restarted worker.
        for queued in await self.commands.queue(name_prefix=name):
            if queued.name == name and (queued.pending or queued.running):
                return SlurmJobRef(copy_id=copy.copy_id, job_id=queued.job_id, job_dir=str(job_dir), adopted=True)
        picked = self._picked(copy)
        argvs = rank_argvs(self.engine_command, copy.copy_id, copy.workflow_id, copy.engine, copy.nodes,
                           copy.gpus_per_node, copy.model_dir)
        environment = engine_environment_for(copy.engine, self.inherited)
        users = await self._jail_users()
        jail = None if users is None else await asyncio.to_thread(
            jail_plan, users, copy.owner, copy.workflow_id, job_dir, Path(self.commands.settings.shared_dir), argvs,
            environment, copy.model_dir, self.secret_dirs)
        description = job_description(argvs, copy.copy_id, copy.nodes, environment,
                                      self.commands.settings.node_address, copy.engine.startup_timeout_s, jail)
        await asyncio.to_thread(_fresh_job_dir, job_dir, description, self.replica_keys.for_copy(copy.copy_id))
        job = CopyJob(copy_id=copy.copy_id, nodes=copy.nodes, gpus_per_node=copy.gpus_per_node,
                      job_dir=str(job_dir), launcher=self.launcher, partition=picked.partition,
                      account=picked.account, time_limit=picked.time_limit)
        options, script = render(job, self.commands.settings)
        try:
            job_id = await self.commands.submit(options, script, self.inherited)
        except SlurmRefused as refusal:
            raise ApplicationError(str(refusal), type="SlurmRefused", non_retryable=True) from None
        return SlurmJobRef(copy_id=copy.copy_id, job_id=job_id, job_dir=str(job_dir))

    @implements(stubs.slurm_copy_state)
    async def slurm_copy_state(self, job: SlurmJobRef) -> SlurmJobView:
        queued = await self.commands.queue([job.job_id])
        if not queued:
            return await self._reported(job, "GONE")
        return await self._reported(job, queued[0].state, queued[0].reason if queued[0].pending else "")

    async def _reported(self, job: SlurmJobRef, state: str, reason: str = "") -> SlurmJobView:
        """The job in `state` (as squeue said it last), with what its ranks reported in the job directory."""
        leader, ranks = await asyncio.to_thread(read_reports, Path(job.job_dir))
        url = f"{RANK_SCHEME}://{leader['host']}:{leader['port']}" if leader else None
        nodes = tuple(str(r["node"]) for r in ranks)
        return SlurmJobView(state=state, reason=reason, nodes=nodes, url=url, ranks_reported=len(set(nodes)))

    @implements(stubs.wait_slurm_copy_started)
    async def wait_slurm_copy_started(self, wait: SlurmStartWait) -> SlurmJobView:
        """The job as soon as it is no longer pending, or pending for a reason other than the one the pool was last
        told (`wait.told`). Heartbeats at each look."""
        job_dir, interval = Path(wait.job.job_dir), FIRST_LOOK_S
        since = time.monotonic()
        while True:
            view = await self.slurm_copy_state(wait.job)
            unlooked = view.reason == NOT_LOOKED_AT and time.monotonic() - since < NOT_LOOKED_AT_S
            if not view.pending or (view.reason != wait.told and not unlooked):
                return view
            activity.heartbeat(view.reason)
            if view.ranks_reported:  # started, but squeue still says CONFIGURING (nodes booting): wait it out
                await asyncio.sleep(interval)
            else:
                await _until_a_rank_reports(job_dir, interval)
            interval = min(interval * 2, MAX_PENDING_LOOK_S)

    @implements(stubs.wait_slurm_copy_ready)
    async def wait_slurm_copy_ready(self, check: SlurmReadyCheck) -> SlurmJobView:
        """Ready = every rank started on a node of its own (a job holding N nodes but running on one is never
        ready), rank 0's /health answers 200, and /v1/models (with the copy's key) lists the model. The ranks'
        reports and rank 0 are looked at every REPORT_LOOK_S, squeue (has the job ended?) every POLL_S."""
        deadline = time.monotonic() + check.timeout_s
        last = "no answer yet"
        headers = {"Authorization": f"Bearer {self.replica_keys.for_copy(check.job.copy_id)}"}
        queued_at, view = time.monotonic(), SlurmJobView(state="RUNNING")  # started: squeue said so just now
        # Rank 0 serves plain http (its url below): no CA store to load (30 ms of CPU, berth/tls_client.py).
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0), verify=url_context(RANK_SCHEME, None)) as client:
            while time.monotonic() < deadline:
                activity.heartbeat(last)
                if time.monotonic() - queued_at < POLL_S:
                    view = await self._reported(check.job, view.state)
                else:
                    queued_at, view = time.monotonic(), await self.slurm_copy_state(check.job)
                if view.ended:
                    raise ApplicationError(f"Slurm job {check.job.job_id} ended ({view.state}) before its copy was "
                                           "ready", type="NotReady", non_retryable=True)
                if view.url is None or view.ranks_reported < check.nodes:
                    last = (f"{view.ranks_reported} of {check.nodes} ranks started on nodes of their own "
                            f"({', '.join(view.nodes) or 'none yet'})")
                else:
                    last = await _serving(client, view.url, headers, check.model_id)
                    if not last:
                        return view
                await asyncio.sleep(REPORT_LOOK_S)
        raise ApplicationError(f"Slurm job {check.job.job_id}'s copy was not ready within {check.timeout_s:.0f} s "
                               f"({last})", type="NotReady", non_retryable=True)

    @implements(stubs.watch_slurm_copy)
    async def watch_slurm_copy(self, job: SlurmJobRef) -> SlurmCopyEnd:
        """Until the job ends (its first rank to end badly ends it: --kill-on-bad-exit); how it ended."""
        while True:
            queued = await self.commands.queue([job.job_id])
            if not any(q.pending or q.running for q in queued):
                break
            activity.heartbeat(queued[0].state if queued else "")
            await asyncio.sleep(POLL_S)
        return await self._ending(job)

    async def _ending(self, job: SlurmJobRef) -> SlurmCopyEnd:
        deadline = time.monotonic() + RECORD_WAIT_S
        name = job_name(job.copy_id)
        finished = await self.commands.finished(job.job_id, name)
        while finished is None and time.monotonic() < deadline:
            activity.heartbeat("waiting for sacct")
            await asyncio.sleep(POLL_S)
            finished = await self.commands.finished(job.job_id, name)
        output = await asyncio.to_thread(tail, Path(job.job_dir) / f"slurm-{job.job_id}.out", 15)
        failure = failed_rank(output)
        if failure is not None:
            failure = failure.model_copy(update={"log_tail": output})
        state = finished.state if finished else "UNKNOWN"
        where = f" on {finished.nodes}" if finished and finished.nodes else ""
        status = f", exit status {finished.exit_status}" if finished else ""
        signal = f", signal {finished.signal}" if finished and finished.signal else ""
        return SlurmCopyEnd(state=state, failure=failure,
                            message=f"Slurm job {job.job_id} ended {state}{where}{status}{signal}")

    @implements(stubs.watch_slurm_copy_health)
    async def watch_slurm_copy_health(self, check: HealthCheck) -> str:
        """Probe rank 0's /health as a livenessProbe (activities/health.py, as on Berth's nodes) until it is hung;
        why. Heartbeats each second while it stays healthy."""
        probing = asyncio.ensure_future(until_hung(check))
        try:
            while not probing.done():
                activity.heartbeat()
                await asyncio.wait([probing], timeout=1.0)
            return probing.result()
        finally:
            probing.cancel()

    @implements(stubs.cancel_slurm_copy)
    async def cancel_slurm_copy(self, job: SlurmJobRef) -> None:
        """scancel, then wait until squeue lists the job no more (its processes are gone)."""
        await self.commands.cancel(job.job_id)
        activity.heartbeat("cancelled")
        await self.commands.wait_gone(job.job_id, timeout_s=120)


async def _serving(client: httpx.AsyncClient, url: str, headers: Mapping[str, str], model_id: str) -> str:
    """"" when rank 0 serves the model; else what it answered."""
    try:
        health = await client.get(f"{url}/health")
        if health.status_code != 200:
            return f"/health answered {health.status_code}"
        models = await client.get(f"{url}/v1/models", headers=dict(headers))
        ids = [m.get("id") for m in models.json().get("data", [])] if models.is_success else []
        return "" if model_id in ids else f"/v1/models lists {ids}, not {model_id} yet"
    except (httpx.HTTPError, ValueError) as error:
        return f"{type(error).__name__} from {url}"


def _any_rank_reported(job_dir: Path) -> bool:
    """Whether a rank of the job has started (its launcher wrote its report): a blocking stat."""
    return (job_dir / "leader.json").exists() or any(job_dir.glob("rank-*.json"))


async def _until_a_rank_reports(job_dir: Path, seconds: float) -> None:
    """Up to `seconds`; sooner once a rank's report is in the job directory (then the job runs)."""
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(_any_rank_reported, job_dir):
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(REPORT_LOOK_S)


def _fresh_job_dir(job_dir: Path, description: Mapping[str, object], key: str) -> None:
    """The job directory with no report of an earlier attempt (a launcher must not find a stale leader.json)."""
    for stale in (*job_dir.glob("rank-*.json"), job_dir / "leader.json"):
        stale.unlink(missing_ok=True)
    write_job_dir(job_dir, description, key)


def for_cluster(settings: SlurmSettings, replica_keys: ReplicaKeys, environ: Mapping[str, str] | None = None,
                state_dir: Path | None = None) -> SlurmCopyActivities:
    """The control worker's Slurm activities as the settings configure them: the engine the compute nodes run,
    Berth's interpreter there (the worker's own path unless set), and what a job may inherit — the base and the
    operator's engine knobs (never a credential: berth/child_environment.py), plus SLURM_CONF for `srun` inside
    the job when the settings name one."""
    source = os.environ if environ is None else environ
    inherited = engine_environment(source, simulator=settings.engine == "simulator")
    inherited.update({name: value for name, value in engine_defaults(settings.engine).items() if name not in inherited})
    if settings.conf:
        inherited["SLURM_CONF"] = settings.conf
    launcher = launcher_argv(settings.python or sys.executable, str(Path(rank.__file__).parent / "slurm_rank.py"))
    return SlurmCopyActivities(SlurmCommands(settings, source), replica_keys, engine_command(settings.engine),
                               launcher, inherited, rank_user_setting(source), (state_dir,) if state_dir else ())
