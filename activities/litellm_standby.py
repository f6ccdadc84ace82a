"""The node agent's LiteLLM standby (the other half runs in LiteLLM's interpreter: gateway/litellm_hooks/standby.py).

A cold LiteLLM spends most of its start importing (about 8 s of CPU; 20-45 s on a busy machine). The agent
keeps one LiteLLM interpreter that has imported once, under the environment every LiteLLM of this agent shares
and no secret — a zygote — and has it fork each LiteLLM launch: every start and every restart after a kill then
costs LiteLLM's own start-up only, and no import is paid again. BERTH_LITELLM_STANDBY says when it is spawned:
`on` (the default) when the agent starts, `lazy` at the agent's first LiteLLM launch (which waits for its imports:
a node that never fronts a pool holds no spare), `off` never.

A launch the standby cannot serve exactly as a cold start would (another executable, a shared variable that
differs) is started cold, and the standby is kept for the next one."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from activities.front_launch import FrontLaunch
from activities.litellm_service import find_litellm_executable, shared_environment
from activities.rank_jail import JAIL_SCRIPT, unjailed
from berth.processes import pid_gone, script_interpreter

log = logging.getLogger("berth.node.litellm_standby")

STANDBY_MODULE: Final = "gateway.litellm_hooks.standby"
STANDBY_LOG: Final = "litellm-standby.log"
# The standby imports on idle CPU only (measured: at the agent's own priority, two agents' spares took a stack
# start from 17 s to 33 s on two cores); each fork gets the agent's priority back.
SPARE_NICENESS: Final = 10
# A fork is answered at once by an imported standby; one still importing answers after its imports (20-45 s on
# a busy machine). Past this, it is stopped and the launch started cold.
FORK_ANSWER_S: Final = 240.0
POLL_S: Final = 0.25  # how often the end of a fork whose standby ended first is looked for
REPLY_LIMIT_BYTES: Final = 4096  # a reply is a pid or an exit status
StandbyMode = Literal["on", "lazy", "off"]
# Set per launch for the user a jailed LiteLLM runs as (activities/launches.py `litellm_front`), so not the
# standby's: LiteLLM's imports capture none of them (checked: only `site`'s user directory, unused in a virtualenv).
PER_USER: Final = frozenset({"HOME", "USER", "LOGNAME"})


def set_niceness(pid: int, niceness: int) -> bool:
    """Every thread of `pid` at `niceness` (Linux's nice is per thread); False when not allowed or gone."""
    try:
        threads = [int(name) for name in os.listdir(f"/proc/{pid}/task")]
        for thread in threads:
            os.setpriority(os.PRIO_PROCESS, thread, niceness)
    except (OSError, ValueError):
        return False
    return True


class ForkedProcess:
    """A LiteLLM the standby forked. It is not the agent's child: its exit status is what the standby reports,
    and unknown (None) when the standby ended first (then its end is polled, as an adopted process's is)."""

    def __init__(self, pid: int) -> None:
        self.pid: Final = pid
        self._exit: Final[asyncio.Future[int | None]] = asyncio.get_running_loop().create_future()
        self._gone = False

    def exited(self, code: int | None) -> None:
        if not self._exit.done():
            self._exit.set_result(code)

    @property
    def returncode(self) -> int | None:
        return self._exit.result() if self._exit.done() else None

    async def wait(self) -> int | None:
        code = await asyncio.shield(self._exit)  # a cancelled wait (each heartbeat's) leaves the future be
        if code is None:
            await pid_gone(self.pid, POLL_S)  # not our child any more: nothing to wait on
        return code


def _stop_unwanted(answer: asyncio.Future[ForkedProcess]) -> None:
    if not answer.cancelled() and answer.exception() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(answer.result().pid, signal.SIGKILL)


class Standby:
    """One spawned standby: its process, the executable it stands in for, the environment it imported under, and
    the children it forked that are still running."""

    def __init__(self, process: asyncio.subprocess.Process, executable: str, environment: Mapping[str, str]) -> None:
        self.process: Final = process
        self.executable: Final = executable
        self.environment: Final = dict(environment)
        self._answers: Final[collections.deque[asyncio.Future[ForkedProcess]]] = collections.deque()
        self._children: Final[dict[int, ForkedProcess]] = {}
        self._reading: Final = asyncio.create_task(self._read())

    def fits(self, launch: FrontLaunch) -> bool:
        """True when forking `launch` is what a cold start of it would be (a jailed one's: the jail's)."""
        argv, environment, _plan = unjailed(launch.argv, launch.environment)
        return (self.process.returncode is None and not self._reading.done() and bool(argv)
                and os.path.realpath(argv[0]) == os.path.realpath(self.executable)
                and all(environment.get(name) == value for name, value in self.environment.items()
                        if name not in PER_USER))

    async def fork(self, launch: FrontLaunch, log_path: Path) -> ForkedProcess:
        """The launch, forked (a jailed one enters its jail in the fork); raises ProcessLookupError when the standby
        ended first, TimeoutError when it did not answer in FORK_ANSWER_S."""
        argv, environment, plan = unjailed(launch.argv, launch.environment)
        order = {"argv": argv, "environment": environment, "cwd": str(launch.working_directory),
                 "log": str(log_path), "niceness": os.getpriority(os.PRIO_PROCESS, 0),
                 "jail": None if plan is None else {"script": str(JAIL_SCRIPT), "plan": plan}}
        answer: asyncio.Future[ForkedProcess] = asyncio.get_running_loop().create_future()
        self._answers.append(answer)  # answers come in order: the standby forks one order after another
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(order).encode() + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            self._answers.remove(answer)  # never sent: no answer will come
            raise ProcessLookupError("the LiteLLM standby ended") from None
        try:
            return await asyncio.wait_for(asyncio.shield(answer), FORK_ANSWER_S)
        except BaseException:
            answer.add_done_callback(_stop_unwanted)  # a fork nobody waits for any more must not serve on
            raise

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                self._take_reply(json.loads(line[:REPLY_LIMIT_BYTES]))
        except (ValueError, TypeError, KeyError, asyncio.LimitOverrunError) as error:
            log.warning("the LiteLLM standby answered what it should not (%s): it is stopped", error)
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        finally:
            for answer in self._answers:
                if not answer.done():
                    answer.set_exception(ProcessLookupError("the LiteLLM standby ended"))
            for child in self._children.values():
                child.exited(None)  # unknown now: each is polled until it ends

    def _take_reply(self, reply: dict[str, int]) -> None:
        if "pid" in reply:
            child = ForkedProcess(int(reply["pid"]))
            self._children[child.pid] = child
            answer = self._answers.popleft()
            if not answer.done():
                answer.set_result(child)
        elif "exited" in reply:
            ended = self._children.pop(int(reply["exited"]), None)
            if ended is not None:
                ended.exited(int(reply["code"]))

    async def stop(self) -> None:
        """Kill it (its forked proxies live on, each in its own session) and reap it."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()
        with contextlib.suppress(BaseException):
            await self._reading


class LiteLLMStandby:
    """The agent's one LiteLLM standby, kept for its life (spawned again only if it ends)."""

    def __init__(self, directory: Path, mode: StandbyMode) -> None:
        self.directory: Final = directory
        self.mode: Final = mode
        self._standby: Standby | None = None
        self._spawning: asyncio.Task[None] | None = None

    @property
    def spare_pid(self) -> int | None:
        """The running standby's pid (None while there is none): `berth node`'s figures and the tests read it."""
        standby = self._standby
        return standby.process.pid if standby is not None and standby.process.returncode is None else None

    def warm(self, *, launching: bool = False) -> None:
        """Start a standby in the background when none is running or being started: at the agent's start in
        mode `on`, at its first launch (`launching`) in mode `lazy`."""
        if self.mode == "off" or self.mode == "lazy" and not launching:
            return
        if self._spawning is not None and not self._spawning.done():
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
            # `-P`: no working directory on sys.path; the hooks import from PYTHONPATH (the checkout). Its own
            # session: the forked proxies make their own, and none of them is in the agent's group.
            process = await asyncio.create_subprocess_exec(
                str(python), "-P", "-m", STANDBY_MODULE, "--parent", str(os.getpid()), cwd=self.directory,
                env=environment, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=output,
                start_new_session=True)
        # Only an agent that may raise a priority back again lowers one (root, on a GPU node).
        if os.geteuid() == 0:
            set_niceness(process.pid, os.getpriority(os.PRIO_PROCESS, 0) + SPARE_NICENESS)
        self._standby = Standby(process, executable, environment)

    async def take(self, launch: FrontLaunch, log_path: Path) -> ForkedProcess | None:
        """`launch` forked from the standby (the process to own), or None: start `launch` cold."""
        self.warm(launching=True)
        if self._spawning is not None:
            with contextlib.suppress(Exception):
                await self._spawning  # a spawn in flight is a moment from being one: wait for it
        standby = self._standby
        if standby is None or not standby.fits(launch):
            if standby is not None and standby.process.returncode is not None:
                self._standby = None
                self.warm(launching=True)  # it ended: the next launch gets a new one
            return None
        try:
            return await standby.fork(launch, log_path)
        except (ProcessLookupError, TimeoutError) as error:
            log.warning("the LiteLLM standby did not fork %s (%s): started cold", launch.argv[0], error or "timeout")
            self._standby = None
            await standby.stop()
            self.warm(launching=True)
            return None

    async def close(self) -> None:
        if self._spawning is not None:
            self._spawning.cancel()
            with contextlib.suppress(BaseException):
                await self._spawning
        if self._standby is not None:
            await self._standby.stop()
            self._standby = None
