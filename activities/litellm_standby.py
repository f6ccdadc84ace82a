"""The node agent's LiteLLM standby (the other half runs in LiteLLM's interpreter: gateway/litellm_hooks/standby.py).

A cold LiteLLM spends most of its start importing (about 8 s of CPU; 20-45 s on a busy machine). The agent
keeps one LiteLLM interpreter that has already imported, under the environment every LiteLLM of this agent
shares and no secret, and hands it the next LiteLLM launch: the start and every restart after a kill then
cost LiteLLM's own start-up only. A standby is spawned when the agent starts (BERTH_LITELLM_STANDBY=on, the
default) and again after each handover, one at a time, so the agent holds one spare, never a pool.

A launch the standby cannot serve exactly as a cold start would (another executable, a shared variable that
differs) is started cold, and the standby is kept for the next one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from activities.front_launch import FrontLaunch
from activities.litellm_service import find_litellm_executable, shared_environment
from berth.processes import script_interpreter

log = logging.getLogger("berth.node.litellm_standby")

STANDBY_MODULE: Final = "gateway.litellm_hooks.standby"
STANDBY_LOG: Final = "litellm-standby.log"
# A spare imports on idle CPU only (measured: at the agent's own priority, two agents' spares took a stack
# start from 17 s to 33 s on two cores); the one handed over gets the agent's priority back.
SPARE_NICENESS: Final = 10


def set_niceness(pid: int, niceness: int) -> bool:
    """Every thread of `pid` at `niceness` (Linux's nice is per thread); False when not allowed or gone."""
    try:
        threads = [int(name) for name in os.listdir(f"/proc/{pid}/task")]
        for thread in threads:
            os.setpriority(os.PRIO_PROCESS, thread, niceness)
    except (OSError, ValueError):
        return False
    return True


class Standby:
    """One spawned standby: its process, the executable it stands in for and the environment it imported under."""

    def __init__(self, process: asyncio.subprocess.Process, executable: str, environment: Mapping[str, str]) -> None:
        self.process: Final = process
        self.executable: Final = executable
        self.environment: Final = dict(environment)

    def fits(self, launch: FrontLaunch) -> bool:
        """True when becoming `launch` is what a cold start of it would be."""
        return (self.process.returncode is None and bool(launch.argv) and launch.argv[0] == self.executable
                and all(launch.environment.get(name) == value for name, value in self.environment.items()))

    async def hand_over(self, launch: FrontLaunch, log_path: Path) -> asyncio.subprocess.Process:
        order = {"argv": list(launch.argv), "environment": dict(launch.environment),
                 "cwd": str(launch.working_directory), "log": str(log_path)}
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(order).encode() + b"\n")
        await stdin.drain()
        stdin.close()
        return self.process

    async def stop(self) -> None:
        """Kill it (it serves nothing yet: no grace) and reap it."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()


class LiteLLMStandby:
    """The agent's one spare LiteLLM interpreter, replaced after each handover."""

    def __init__(self, directory: Path, enabled: bool) -> None:
        self.directory: Final = directory
        self.enabled: Final = enabled
        self._standby: Standby | None = None
        self._spawning: asyncio.Task[None] | None = None

    @property
    def spare_pid(self) -> int | None:
        """The running standby's pid (None while there is none): `berth node`'s figures and the tests read it."""
        standby = self._standby
        return standby.process.pid if standby is not None and standby.process.returncode is None else None

    def warm(self) -> None:
        """Start a standby in the background when none is running or being started."""
        if not self.enabled or self._spawning is not None and not self._spawning.done():
            return
        if self._standby is not None and self._standby.process.returncode is None:
            return
        self._spawning = asyncio.create_task(self._spawn())

    async def _spawn(self) -> None:
        try:
            executable = find_litellm_executable()
        except FileNotFoundError:
            return  # no LiteLLM on this node: its launches fail cold, in their own words
        python = script_interpreter(executable)
        if python is None:
            log.info("no LiteLLM standby: %s is not a Python script with its own interpreter", executable)
            return
        environment = shared_environment()
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
        with open(self.directory / STANDBY_LOG, "ab", buffering=0) as output:  # noqa: ASYNC230
            # `-P`: no working directory on sys.path; the hooks import from PYTHONPATH (the checkout). Its
            # own session from the start, as a cold front's: the pid the agent records is its group's.
            process = await asyncio.create_subprocess_exec(
                str(python), "-P", "-m", STANDBY_MODULE, "--parent", str(os.getpid()), cwd=self.directory,
                env=environment, stdin=asyncio.subprocess.PIPE, stdout=output, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)
        # Only an agent that may raise a priority back again lowers one (root, on a GPU node).
        if os.geteuid() == 0:
            set_niceness(process.pid, os.getpriority(os.PRIO_PROCESS, 0) + SPARE_NICENESS)
        self._standby = Standby(process, executable, environment)

    async def take(self, launch: FrontLaunch, log_path: Path) -> asyncio.subprocess.Process | None:
        """The standby become `launch` (its pid is the process to own), or None: start `launch` cold."""
        if self._spawning is not None:
            with contextlib.suppress(Exception):
                await self._spawning  # a spawn in flight is seconds from being one: wait for it
        standby = self._standby
        if standby is None or not standby.fits(launch):
            if standby is not None and standby.process.returncode is not None:
                self._standby = None
                self.warm()
            return None
        self._standby = None
        if os.geteuid() == 0:
            set_niceness(standby.process.pid, os.getpriority(os.PRIO_PROCESS, 0))  # it serves now
        try:
            process = await standby.hand_over(launch, log_path)
        except (BrokenPipeError, ConnectionResetError):
            await standby.stop()  # it died between the check and the order
            process = None
        self.warm()
        return process

    async def close(self) -> None:
        if self._spawning is not None:
            self._spawning.cancel()
            with contextlib.suppress(BaseException):
                await self._spawning
        if self._standby is not None:
            await self._standby.stop()
            self._standby = None

