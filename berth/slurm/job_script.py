"""A copy as one Slurm batch job (issue 35): the `sbatch` options and the batch script, rendered from typed values.

The script only `srun`s Berth's rank launcher (rank/slurm_rank.py) once per node: `--kill-on-bad-exit=1` ends the
whole job when any rank ends badly, so a copy fails as a unit, as on Berth's own nodes. The script names no
credential and no value a user typed: the engine's argv and environment are in the job directory's `copy.json`,
the copy's key in a 0600 file beside it, both written by Berth's worker. Pure: no I/O."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from berth.settings.slurm import SLURM_WORD, SlurmSettings

JOB_NAME_PREFIX = "berth-"
_COPY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,150}$")
_WORD = re.compile(SLURM_WORD)


@dataclass(frozen=True)
class CopyJob:
    """One copy's job: its shape, where its files live, what runs each rank, and what the values chose."""

    copy_id: str
    nodes: int
    gpus_per_node: int
    job_dir: str  # on the shared filesystem: copy.json, the key file, the ranks' reports and logs
    launcher: tuple[str, ...]  # the rank launcher's argv up to (not including) the job dir
    partition: str = ""  # a workflow value's pick, already checked against the selectable lists; "": the setting's
    account: str = ""
    time_limit: str = ""
    extra_options: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not _COPY_ID.match(self.copy_id):
            raise ValueError(f"copy id {self.copy_id!r} cannot name a Slurm job")
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise ValueError("a copy needs at least one node and no negative GPU count")
        for word in (self.partition, self.account):
            if word and not _WORD.match(word):
                raise ValueError(f"{word!r} is not a Slurm partition or account name")


def job_name(copy_id: str) -> str:
    """The job's name: how `squeue`/`sacct` show it, and how a restarted worker finds its jobs again."""
    return JOB_NAME_PREFIX + copy_id


def sbatch_options(job: CopyJob, settings: SlurmSettings) -> list[str]:
    """The `sbatch` options: one task per node (the rank launcher), the copy's GPUs on each node, the job's
    files in its directory, and the site's settings (a workflow's pick in place of the default)."""
    options = [f"--job-name={job_name(job.copy_id)}", f"--nodes={job.nodes}", "--ntasks-per-node=1",
               f"--chdir={job.job_dir}", f"--output={job.job_dir}/slurm-%j.out", "--export=ALL"]
    if job.gpus_per_node:
        options.append(f"--gpus-per-node={job.gpus_per_node}")
    for flag, chosen, default in (("--partition", job.partition, settings.partition),
                                  ("--account", job.account, settings.account),
                                  ("--time", job.time_limit, settings.time_limit)):
        if chosen or default:
            options.append(f"{flag}={chosen or default}")
    if settings.qos:
        options.append(f"--qos={settings.qos}")
    return options + list(settings.sbatch_options) + list(job.extra_options)


def batch_script(job: CopyJob) -> str:
    """The batch script: rank 0's node runs it, and it starts one rank per node with `srun`."""
    launcher = " ".join(shlex.quote(word) for word in (*job.launcher, job.job_dir))
    return "\n".join((
        "#!/bin/bash",
        f"# Berth copy {job.copy_id}: {job.nodes} node(s), one rank each; rank 0 serves (issue 35).",
        "# --kill-on-bad-exit: a rank that ends badly ends the job, so the copy fails and is re-placed as a unit.",
        f"exec srun --kill-on-bad-exit=1 --nodes={job.nodes} --ntasks-per-node=1 --export=ALL {launcher}",
        "",
    ))


def launcher_argv(python: str, script: str) -> tuple[str, ...]:
    """How a compute node runs the rank launcher: Berth's interpreter on the shared filesystem, isolated (-I:
    no user site, no PYTHONPATH, no current directory on the path), the launcher as a script."""
    return (python, "-I", script)


def render(job: CopyJob, settings: SlurmSettings) -> tuple[list[str], str]:
    """Both halves at once, for the one caller that submits."""
    return sbatch_options(job, settings), batch_script(job)
