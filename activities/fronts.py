"""Node activities for an endpoint's front process (a pool's LiteLLM proxy, the gateway, OpenCode): start
what its kind's launch builds (activities/launches.py), own the process exactly like a rank, and probe
its liveness."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.front_jail import jailed_launch
from activities.front_launch import FrontLaunch
from activities.launches import LAUNCHES
from activities.litellm_standby import LiteLLMStandby
from activities.node_context import NodeContext
from activities.rank_identities import RankIdentities
from activities.supervision import HEARTBEAT_EVERY_S, SERVICE_PIDFILE, Supervisor
from berth.api_client import ApiClient
from berth.kinds import ProcessKind
from berth.processes import OwnedProcess, remove_file, tail
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import FrontExit, FrontRun, LiveCheck


class FrontActivities:
    """Front processes bound to one node agent (their secrets are resolved by the launches, on the node)."""

    def __init__(self, context: NodeContext, supervisor: Supervisor, api: ApiClient,
                 standby: LiteLLMStandby, rank_users: RankIdentities | None = None) -> None:
        self.context = context
        self.supervisor = supervisor
        self.api = api
        self.standby = standby
        # The ranks' users (node/agent.py): a launch that says what it needs (OpenCode's) starts jailed, as its
        # workflow's own user.
        self.rank_users = rank_users

    async def _launch(self, run: FrontRun, workdir: Path) -> FrontLaunch:
        launch = await LAUNCHES[ProcessKind(run.kind)](self.api, self.context, run, workdir)
        users = self.rank_users
        if users is None or launch.jail is None:
            return launch  # an agent that is not root: as itself, as its ranks (activities/rank_jail.py)

        def jail() -> FrontLaunch:
            assert users is not None
            return jailed_launch(users.for_workflow(run.workflow_id), launch, self.context.state.root)
        return await asyncio.to_thread(jail)

    @implements(stubs.run_service)
    async def run_service(self, run: FrontRun) -> FrontExit:
        """Own one service process from start to exit; heartbeat while it lives; SIGTERM then SIGKILL
        its process group on cancellation. Returns how it ended."""
        if run.kind not in LAUNCHES:
            raise ApplicationError(f"unknown service kind '{run.kind}'", type="ServiceConfig",
                                   non_retryable=True)
        context = self.context
        workdir = self._workdir(run)
        log_path = self._log_path(run)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        launch = await self._launch(run, workdir)
        process = await self._start(run, launch, log_path)
        pidfile = workdir / SERVICE_PIDFILE
        await self.supervisor.record(pidfile, process.pid, name=run.name, workflow_id=run.workflow_id,
                                     log=str(log_path))
        try:
            code = await self.supervisor.watch(process, run.name)
        finally:
            remove_file(pidfile)
        # Unknown only for a fork whose standby ended before it did (activities/litellm_standby.py).
        return FrontExit(name=run.name, node_id=context.node_id,
                         exit_code=code if code is not None and code >= 0 else None,
                         signal=-code if code is not None and code < 0 else None,
                         note="" if code is not None else "its LiteLLM standby ended first, so its status is unknown",
                         log_tail=tail(log_path, 15))

    @implements(stubs.adopt_service)
    async def adopt_service(self, run: FrontRun) -> FrontExit:
        """Take back a service whose previous agent died (see Supervisor.adopt): it keeps its pid and port."""
        adopted = await self.supervisor.adopt(self._workdir(run) / SERVICE_PIDFILE, run.name, self._log_path(run))
        return FrontExit(name=run.name, node_id=self.context.node_id, reason="lost" if adopted.lost else "exited",
                           note=adopted.note, log_tail=adopted.log_tail)

    async def _start(self, run: FrontRun, launch: FrontLaunch, log_path: Path) -> OwnedProcess:
        """The front's process: forked from the agent's LiteLLM standby where it can be, else a cold start."""
        context = self.context
        # A local file opened once per service start: not worth a thread hop.
        with open(log_path, "ab", buffering=0) as log:  # noqa: ASYNC230
            # The command line holds no secret (the key lives only in the process environment).
            argv = " ".join(launch.argv)
            log.write(f"[berth] node {context.node_id} starting {run.name}: {argv}\n".encode())
            if run.kind == ProcessKind.LITELLM:
                # A standby still importing answers after its imports: the activity beats meanwhile.
                beating = asyncio.create_task(_heartbeat_every(HEARTBEAT_EVERY_S))
                try:
                    warm = await self.standby.take(launch, log_path)
                finally:
                    beating.cancel()
                if warm is not None:
                    log.write(f"[berth] {run.name} is forked from the LiteLLM standby (pid {warm.pid}), "
                              "imported ahead\n".encode())
                    return warm
            try:
                return await asyncio.create_subprocess_exec(
                    *launch.argv, cwd=launch.working_directory, env=dict(launch.environment),
                    stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as error:
                message = f"node {context.node_id} could not start {run.name} ({launch.argv[0]}): {error}"
                log.write(f"[berth] {message}\n".encode())
                raise ApplicationError(message, type="ServiceSpawnFailed", non_retryable=True) from None

    def _workdir(self, run: FrontRun) -> Path:
        return self.context.node_dir / "services" / f"{run.workflow_id}.{run.name}"

    def _log_path(self, run: FrontRun) -> Path:
        return self.context.state.workflow_logs(run.workflow_id) / run.name / f"{run.name}.log"

    @implements(stubs.wait_live)
    async def wait_live(self, check: LiveCheck) -> float:
        """Poll `url + path` until it answers 200; return the seconds waited."""
        started = time.monotonic()
        last = "no answer yet"
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0), trust_env=False) as client:
            while time.monotonic() - started < check.timeout_s:
                activity.heartbeat(last)
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(check.url + check.path)
                    if response.status_code == 200 or (check.unauthorized_is_live and response.status_code == 401):
                        return time.monotonic() - started
                    last = f"{check.path} answered {response.status_code}"
                await asyncio.sleep(0.2)
        raise ApplicationError(f"{check.url} was not live within {check.timeout_s:.0f} s ({last})",
                               type="NotReady", non_retryable=True)





async def _heartbeat_every(every_s: float) -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(every_s)
