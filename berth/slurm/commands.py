"""Slurm's own commands (`sbatch`, `squeue`, `scancel`, `sacct`, `scontrol`), run bounded: each with an argv Berth
builds (no shell), an allow-listed environment (never the caller's: a worker's holds Berth's tokens), a timeout
and a cap on what it may print. A refusal comes back as Slurm's own words in one line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Mapping, Sequence

from berth.errors import UnavailableError, UserInputError
from berth.settings.slurm import SlurmSettings
from berth.slurm.records import (
    ACCOUNTING_FIELDS,
    QUEUE_FORMAT,
    SEPARATOR,
    FinishedJob,
    QueuedJob,
    SlurmNode,
    parse_accounting,
    parse_nodes,
    parse_queue,
)

MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # squeue over a busy cluster's Berth jobs is far less
INHERITED = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME")


class SlurmCommandError(UnavailableError):
    """A Slurm command failed for a reason that is not the caller's request (controller down, timeout)."""


class SlurmRefused(UserInputError):
    """Slurm refused the request itself (`sbatch: error: Batch job submission failed: …`): the message is
    Slurm's own line, and asking again will not help."""


def one_line(text: str, limit: int = 500) -> str:
    """Slurm's last error line (sbatch prints several), as one bounded line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines
    return (errors[-1] if errors else "no message")[:limit]


class SlurmCommands:
    """One cluster's commands, as the settings configure them."""

    def __init__(self, settings: SlurmSettings, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        source = os.environ if environ is None else environ
        self.environment = {name: source[name] for name in INHERITED if name in source}
        if settings.conf:
            self.environment["SLURM_CONF"] = settings.conf

    async def run(self, argv: Sequence[str], stdin: bytes | None = None,
                  environment: Mapping[str, str] | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr); a command that does not end within the timeout is killed."""
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=dict(environment if environment is not None else self.environment), start_new_session=True)
        except FileNotFoundError:
            raise SlurmCommandError(f"`{argv[0]}` is not installed on this host: Berth's Slurm backend runs "
                                    "Slurm's client commands (install slurm-client, or set PATH).") from None
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin), self.settings.command_timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise SlurmCommandError(f"`{argv[0]}` did not answer within {self.settings.command_timeout_s:g} s "
                                    "(is slurmctld up?)") from None
        if len(out) > MAX_OUTPUT_BYTES:
            raise SlurmCommandError(f"`{argv[0]}` printed more than {MAX_OUTPUT_BYTES} bytes")
        return process.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")[-8000:]

    async def submit(self, options: Sequence[str], script: str, environment: Mapping[str, str]) -> int:
        """sbatch the script (read from stdin) under `environment` exactly (the job inherits it: --export=ALL
        of an environment that is only what Berth allowed); the job id."""
        status, out, err = await self.run(["sbatch", "--parsable", *options], script.encode(), environment)
        if status != 0:
            raise SlurmRefused(f"Slurm refused the job: {one_line(err or out)}")
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmCommandError(f"sbatch printed no job id: {one_line(out + err)}")
        return int(job_id)

    def refusal(self, options: Sequence[str]) -> str | None:
        """Slurm's own line when it would never run a job of these options (`sbatch --test-only`: nothing is
        submitted), else None. Blocking, for the API's submission check, which runs in a worker thread."""
        try:
            done = subprocess.run(["sbatch", "--test-only", *options], input=b"#!/bin/bash\ntrue\n",
                                  capture_output=True, env=self.environment, timeout=self.settings.command_timeout_s,
                                  check=False)
        except FileNotFoundError:
            raise SlurmCommandError("`sbatch` is not installed on this host: Berth's Slurm backend runs Slurm's "
                                    "client commands (install slurm-client, or set PATH).") from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"`sbatch --test-only` did not answer within {self.settings.command_timeout_s:g} "
                                    "s (is slurmctld up?)") from None
        if done.returncode == 0:
            return None
        return one_line(done.stderr.decode(errors="replace")[-8000:] or done.stdout.decode(errors="replace"))

    async def queue(self, job_ids: Sequence[int] = (), name_prefix: str = "") -> list[QueuedJob]:
        """The jobs Slurm still lists (pending, running or just ended), by id or by name prefix."""
        argv = ["squeue", "-h", "--states=all", "-o", QUEUE_FORMAT]
        if job_ids:
            argv += ["-j", ",".join(str(j) for j in job_ids)]
        status, out, err = await self.run(argv)
        if status != 0:
            if "Invalid job id" in err:  # purged since: listed no more
                return []
            raise SlurmCommandError(f"squeue failed: {one_line(err)}")
        jobs = parse_queue(out)
        return [job for job in jobs if job.name.startswith(name_prefix)] if name_prefix else jobs

    async def cancel(self, job_id: int, signal: str | None = None) -> None:
        argv = ["scancel", *(["--signal", signal] if signal else []), str(job_id)]
        status, _, err = await self.run(argv)
        if status != 0 and "Invalid job id" not in err and "already completing" not in err:
            raise SlurmCommandError(f"scancel {job_id} failed: {one_line(err)}")

    async def wait_gone(self, job_id: int, timeout_s: float, poll_s: float = 0.2) -> None:
        """Until `squeue` lists the job no more as pending or running (its processes are gone)."""
        deadline = time.monotonic() + timeout_s
        while any(job.pending or job.running for job in await self.queue([job_id])):
            if time.monotonic() > deadline:
                raise SlurmCommandError(f"job {job_id} still listed by squeue after {timeout_s:g} s")
            await asyncio.sleep(poll_s)

    async def finished(self, job_id: int, name: str | None = None) -> FinishedJob | None:
        """How the job ended, from `sacct` (slurmdbd's accounting, or the job completion log where a site keeps
        no accounting database: `sacct -c`); None: not recorded (yet). slurmdbd learns of a job asynchronously:
        until slurmctld's own record arrives, a job whose steps reached it first shows as a placeholder (named
        "allocation", its first node only; a second later it reads right) — not the ending either, so None when
        the record is not final or, given the job's `name`, names another."""
        fields = ["-P", "-n", "-o", ",".join(ACCOUNTING_FIELDS), "-j", str(job_id)]
        status, out, err = await self.run(["sacct", *fields])
        if status != 0 and "accounting storage is disabled" in (err + out).lower():
            status, out, err = await self.run(["sacct", "-c", *fields])
        if status != 0:
            raise SlurmCommandError(f"sacct failed: {one_line(err or out)}")
        job = next((job for job in parse_accounting(out) if job.job_id == job_id), None)
        if job is None or not job.ended or (name is not None and job.name != name):
            return None
        return job

    async def nodes(self) -> list[SlurmNode]:
        status, out, err = await self.run(["scontrol", "show", "node", "--oneliner"])
        if status != 0:
            raise SlurmCommandError(f"scontrol show node failed: {one_line(err)}")
        return parse_nodes(out)


__all__ = ["SEPARATOR", "SlurmCommandError", "SlurmCommands", "SlurmRefused", "one_line"]
