"""The node agent: registers and heartbeats its inventory, and runs a Temporal worker on its own task
queue `node.<id>` (and the shared `berth-nodes` queue) for rank, service, readiness and weights activities."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.fronts import FrontActivities
from activities.litellm_standby import LiteLLMStandby
from activities.model_jobs import ModelJobActivities
from activities.node_context import NodeContext
from activities.rank_identities import RankIdentities
from activities.rank_jail import RankUser, usable_rank_user
from activities.ranks import NodeActivities, prune_rank_dirs
from activities.supervision import Orphan, Supervisor
from berth.api_client import ApiClient
from berth.api_mig import MigApi
from berth.errors import BerthError, UnavailableError
from berth.heap import settle
from berth.security import Cipher
from berth.settings import (
    NODES_TASK_QUEUE,
    ClusterSettings,
    StateLayout,
    litellm_standby_mode,
    metrics_enabled,
    node_task_queue,
    rank_user_setting,
)
from berth.temporal import connect
from node import mig
from node.inventory import host_facts, nvml_gpus, simulated_gpus
from node.node_metrics import NodeMetrics

log = logging.getLogger("berth.node")
HEARTBEAT_S = 5.0
# How long a starting agent waits for the API to answer its first heartbeat before it gives up (and its
# supervisor restarts it): an agent restarted while the API restarts too (a node host and the control plane
# back from one outage, the chaos smoke's node kill 3 s after its API kill) waits the seconds the API needs
# instead of exiting, and being imported and set up again from nothing, once a second until the API is back.
FIRST_HEARTBEAT_WAIT_S = 60.0
FIRST_HEARTBEAT_RETRY_S = 0.5


@dataclass(frozen=True)
class AgentConfig:
    node_id: str
    state_dir: Path
    api_url: str
    token: str
    temporal_address: str
    address: str = "127.0.0.1"
    engine: str | None = None  # forced engine; None = by inventory
    simulate_gpus: str | None = None
    port_start: int = 20000
    labels: dict[str, str] | None = None
    taints: tuple[str, ...] = ()
    metrics_port: int | None = None  # /metrics on 127.0.0.1:port; None or 0: not served (BERTH_METRICS=off too)


def choose_engine(forced: str | None, simulated: bool, gpus: list[dict[str, Any]]) -> str:
    if forced:
        return forced
    if simulated:
        return "simulator"
    return "vllm" if gpus else "vllm-cpu"


class NodeAgent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.state = StateLayout(config.state_dir)
        if config.simulate_gpus:
            self.gpus = simulated_gpus(config.simulate_gpus, config.node_id)
            self.gpu_note = "simulated"
        else:
            self.gpus, reason = nvml_gpus()
            self.gpu_note = reason or "nvml"
        self.engine = choose_engine(config.engine, bool(config.simulate_gpus), self.gpus)
        self.context = NodeContext(node_id=config.node_id, address=config.address, engine=self.engine,
                                   state=self.state)

    def inventory(self, supervisor: Supervisor) -> dict[str, Any]:
        if not self.config.simulate_gpus and self.gpus:
            self.gpus, _reason = nvml_gpus()  # free memory and temperature move: read them each heartbeat
        volumes_dir = self.state.volumes / "persistent"
        volumes = sorted(p.name for p in volumes_dir.iterdir()) if volumes_dir.exists() else []
        return {"address": self.config.address, "engine": self.engine, "gpus": self.gpus,
                "gpu_source": self.gpu_note, **host_facts(), "labels": self.config.labels or {},
                "taints": list(self.config.taints), "volumes": volumes, "port_start": self.config.port_start,
                "models": _cached_digests(self.state.models),
                # Every live rank's GPUs and ports, orphans' included, from the first heartbeat on: a
                # restarted agent never reports as free what a process it has not stopped yet holds.
                "held": [holding.model_dump(mode="json") for holding in supervisor.holdings()]}

    async def say_leaving(self, api: ApiClient, supervisor: Supervisor) -> None:
        """One last heartbeat that takes the node offline before its ranks stop: their copies are re-placed on
        other nodes, not on this one. Best effort, briefly: an API that cannot be reached changes nothing here
        (the node goes offline when its heartbeats stop, as before)."""
        with contextlib.suppress(BerthError, TimeoutError):
            await asyncio.wait_for(api.heartbeat_node(self.config.node_id,
                                                      {**self.inventory(supervisor), "leaving": True}), 3)

    async def reap_orphans(self, orphans: list[Orphan], marked: list[Path], supervisor: Supervisor,
                           grace_s: float) -> None:
        """Give each orphan (a rank or service a previous agent left running) `grace_s` to be adopted by its
        workflow (adopt_rank, adopt_service), then stop whatever was not; the shutdown markers of ranks a
        previous agent stopped (`marked`) are kept as long, for the same adoptions to read."""
        if not orphans and not marked:
            return
        if orphans:
            log.warning("found %d live process(es) of a previous agent; %.0f s for their workflows to adopt "
                        "them: %s", len(orphans), grace_s, ", ".join(o.pidfile.parent.name for o in orphans))
        await asyncio.sleep(grace_s)
        await supervisor.stop_unadopted(orphans)
        supervisor.drop_unclaimed_markers(marked)

    async def rank_users(self) -> RankIdentities | None:
        """Whom this agent's ranks and jailed services run as: each user's ranks, and each service, a uid of their own
        (activities/rank_identities.py), once the rank user below proved the jail works here."""
        user = await asyncio.to_thread(rank_user)
        if user is None:
            return None
        await asyncio.to_thread(_root_owned, self.context.engine_cache)
        # In the state dir, not the node's: agents sharing one (a test's or a single host's nodes) give a user the same
        # uid, so the ranks of one copy on one host can share memory as one user.
        return RankIdentities(user, self.context.state.root)

    async def heartbeat_forever(self, api: ApiClient, supervisor: Supervisor, metrics: NodeMetrics | None) -> None:
        while True:
            try:
                await api.heartbeat_node(self.config.node_id, self.inventory(supervisor))
                if metrics is not None:
                    metrics.heartbeat_accepted()
            except BerthError as error:
                log.warning("heartbeat failed: %s", error)
            await asyncio.sleep(HEARTBEAT_S)

    async def apply_mig(self, settings: ClusterSettings) -> None:
        """Make this node's pending MIG slices' instances (node/mig.py), where the cluster setting `mig_apply` asks
        and the GPUs are real; otherwise nothing: the records alone are what placement goes by."""
        if not settings.mig_apply or self.config.simulate_gpus or not self.gpus:
            return
        async with MigApi(self.config.api_url, self.config.token) as api:
            await mig.apply_forever(api, self.config.node_id)

    def start_metrics(self, supervisor: Supervisor) -> NodeMetrics | None:
        """The agent's /metrics, when given a port and BERTH_METRICS is not off."""
        if not self.config.metrics_port or not metrics_enabled():
            return None
        metrics = NodeMetrics(supervisor, self.context.downloads)
        metrics.serve(self.config.metrics_port)
        return metrics

    def workers(self, client: Client, functions: Sequence[Callable[..., Any]]) -> tuple[Worker, Worker]:
        """This node's own task queue's worker (its copies' activities) and the one every node shares (jobs that
        need a node but no particular one)."""
        # Generous graceful shutdown: ranks get SIGTERM then SIGKILL and report it before we exit.
        # Cancellation reaches an activity only through a heartbeat, so heartbeats must not be
        # throttled for long: a stopped copy's ranks get SIGTERM within about a second.
        common: dict[str, Any] = {"activities": functions, "graceful_shutdown_timeout": timedelta(seconds=30),
                                  "max_heartbeat_throttle_interval": timedelta(seconds=1),
                                  "default_heartbeat_throttle_interval": timedelta(seconds=1)}
        own = Worker(client, task_queue=node_task_queue(self.config.node_id), max_concurrent_activities=256,
                     **common)
        return own, Worker(client, task_queue=NODES_TASK_QUEUE, max_concurrent_activities=8, **common)

    async def run(self, stop: asyncio.Event) -> None:
        supervisor = Supervisor(self.config.node_id, self.context.node_dir)
        orphans = supervisor.find_orphans()
        marked = supervisor.shutdown_marked()
        # After find_orphans, before the workers run: what a workflow may still adopt (or ask about) is
        # kept, and no rank of this agent can have started yet.
        pruned = prune_rank_dirs(self.context.ranks_dir, {orphan.pidfile.parent for orphan in orphans} | set(marked))
        if pruned:
            log.info("pruned %d stale rank dir(s) and /tmp alias(es): %s", len(pruned), ", ".join(pruned))
        settings = ClusterSettings.load(self.config.state_dir)
        cipher = Cipher.load_or_create(self.state.keys)
        client = await connect(self.config.temporal_address, cipher)
        secrets_api = ApiClient(self.config.api_url, self.config.token)
        users = await self.rank_users()
        activities = NodeActivities(self.context, supervisor, secrets_api, users, settings.weights_endpoint())
        reaper = asyncio.create_task(self.reap_orphans(
            orphans, marked, supervisor, settings.rank_heartbeat_timeout_s + settings.rank_adopt_window_s + 10))
        standby = LiteLLMStandby(self.context.node_dir / "litellm-standby", litellm_standby_mode())
        services = FrontActivities(self.context, supervisor, secrets_api, standby, users)  # OpenCode's jailed too
        models = ModelJobActivities(self.context, secrets_api, settings)
        functions: list[Callable[..., Any]] = [
            activities.run_rank, activities.adopt_rank, activities.wait_ready, activities.download_weights,
            activities.delete_ephemeral_volume, services.run_service, services.adopt_service, services.wait_live,
            models.resolve_model, models.download_model, models.check_model, models.verify_model,
            models.evict_model_cache]
        own, shared = self.workers(client, functions)
        metrics = self.start_metrics(supervisor)
        async with ApiClient(self.config.api_url, self.config.token) as api:
            await first_heartbeat(lambda: api.heartbeat_node(self.config.node_id, self.inventory(supervisor)))
            if metrics is not None:
                metrics.heartbeat_accepted()
            beat = asyncio.create_task(self.heartbeat_forever(api, supervisor, metrics))
            slicing = asyncio.create_task(self.apply_mig(settings))
            runs = [asyncio.create_task(own.run()), asyncio.create_task(shared.run())]
            standby.warm()  # after the workers: the agent serves while its standby imports (mode `on`)
            log.info("node %s ready: engine %s, %d GPU(s) (%s)", self.config.node_id, self.engine,
                     len(self.gpus), self.gpu_note)
            settle()  # what startup made, out of every later collection (berth/heap.py)
            await stop.wait()
            beat.cancel()
            slicing.cancel()
            await self.say_leaving(api, supervisor)
            # Before the workers stop the ranks: should Temporal be unable to record their "agent stopped"
            # results now, the restarted agent asked to adopt them still knows they were interrupted, not lost.
            supervisor.mark_shutdown()
            reaper.cancel()
            await asyncio.gather(own.shutdown(), shared.shutdown())
            for run in runs:
                with contextlib.suppress(Exception):
                    await run
            # A clean shutdown stops every rank and service it owns; orphans still waiting for adoption too.
            await supervisor.stop_unadopted(orphans)
            await standby.close()
            if metrics is not None:
                metrics.close()


async def first_heartbeat(send: Callable[[], Awaitable[Any]], wait_s: float = FIRST_HEARTBEAT_WAIT_S,
                          retry_s: float = FIRST_HEARTBEAT_RETRY_S) -> None:
    """Send the agent's first heartbeat, again every `retry_s` while the API cannot be reached, for `wait_s`
    at most (said once in the log); any other refusal, or an API still down after `wait_s`, is raised."""
    deadline = asyncio.get_running_loop().time() + wait_s
    said = False
    while True:
        try:
            await send()
            return
        except UnavailableError as error:
            if asyncio.get_running_loop().time() + retry_s > deadline:
                raise
            if not said:
                log.warning("%s; the first heartbeat is sent again every %.1f s for up to %.0f s", error, retry_s,
                            wait_s)
                said = True
        await asyncio.sleep(retry_s)


def _root_owned(cache: Path) -> None:
    """The engine cache's top: root's and readable, each rank uid a directory of its own in it (the whole cache was the
    one rank user's before each user had a uid of their own)."""
    cache.mkdir(parents=True, exist_ok=True)
    os.lchown(cache, 0, 0)
    cache.chmod(0o755)


def rank_user() -> RankUser | None:
    """Who this agent's ranks run as (activities/rank_jail.py's usable_rank_user, as BERTH_RANK_USER says)."""
    return usable_rank_user(rank_user_setting(), "the agent")


def run_agent(config: AgentConfig) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await NodeAgent(config).run(stop)

    asyncio.run(main())


def _cached_digests(models: Path) -> list[str]:
    """The digests this node's model cache holds (its sha256/ directory's entries): placement's cache hits."""
    try:
        return sorted(entry.name for entry in os.scandir(models / "sha256") if entry.is_dir() and len(entry.name) == 64)
    except OSError:
        return []
