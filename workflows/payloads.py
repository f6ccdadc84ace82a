"""Payloads shared by client, workflows and activities (pydantic models, one module); the ones the REST
API carries too live in the ground floor, berth/contracts (the pool's status parts are re-exported here)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from berth.contracts import Payload, Rollout
from berth.contracts.placement import SitePlacement

# The pool's status parts, re-exported (`X as X`) so that workflows and activities name every payload here.
from berth.contracts.workflows import CopyInfo as CopyInfo
from berth.contracts.workflows import CopyStatus as CopyStatus
from berth.contracts.workflows import DownloadProgress as DownloadProgress
from berth.contracts.workflows import Event as Event
from berth.contracts.workflows import Phase as Phase
from berth.contracts.workflows import PoolStatus as PoolStatus
from berth.contracts.workflows import RankEnd as RankEnd
from berth.contracts.workflows import WeightsResult as WeightsResult
from catalog.definition import EngineSpec, SlurmPick, WeightsJob, WorkflowDefinition


class Owner(Payload):
    user: str
    groups: tuple[str, ...] = ()
    org: str = ""


class CopyTimings(Payload):
    """How long a copy (or a service workflow, for its service) trusts a silent node agent or a silent
    engine, and how a pool paces replacing failed copies (cluster settings, fixed when the workflow
    starts; histories recorded before a field existed read its default)."""

    rank_heartbeat_timeout_s: float = 30.0  # a rank's agent silent this long → try to re-adopt the rank
    rank_adopt_window_s: float = 60.0  # no agent took the rank back within this → the rank is lost
    health_check_interval_s: float = 5.0  # a ready copy's leader probed on /health this often (0 = never)
    health_check_timeout_s: float = 2.0  # a probe unanswered this long failed
    health_failures_to_fail: int = 3  # this many failed probes in a row → the copy failed as a unit
    replace_backoff_s: float = 5.0  # wait before the 2nd replacement in a row (the 1st: at once); then doubling
    replace_backoff_max_s: float = 120.0
    # The pool continues as new when Temporal suggests it, and also once its history holds this many events
    # (0: only when suggested); tests set it low to force one cheaply.
    continue_as_new_after_events: int = 0


class PoolInput(Payload):
    workflow_id: str
    endpoint_id: str
    owner: Owner
    definition: WorkflowDefinition
    timings: CopyTimings = CopyTimings()
    endpoint_url: str = ""  # the endpoint's stable public URL (shown by a service's show-server job)
    grant: str = ""  # the API's signature over the rest (see `digest`); the control worker runs nothing without it
    # Who places the copies (the cluster's setting when the workflow started): Berth's node agents (CopyWorkflow)
    # or Slurm, each copy one job (SlurmCopyWorkflow, issue 35). Histories from before it read "berth".
    placement_backend: Literal["berth", "slurm"] = "berth"
    # The revision the pool starts serving: 1 for a start; a restored workflow's latest (server/backup.py), so that its
    # next rollout is numbered after the revisions the store keeps. Histories from before it read 1.
    revision: Annotated[int, Field(ge=1)] = 1
    # Set only by the workflow itself when it continues as new (so outside the signed part): the pool it carries.
    carry: PoolCarry | None = None

    def digest(self) -> str:
        """SHA-256 of everything but the grant and carry, in a form both the API and the control worker compute
        alike."""
        canonical = json.dumps(self.model_dump(mode="json", exclude={"grant", "carry"}), sort_keys=True,
                               separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()


class StopRequest(Payload):
    """Stop a service workflow; an argument so that the codec refuses a stop from outside Berth (a signal
    without one carries nothing the codec could check)."""

    by: str


class CopyInput(Payload):
    workflow_id: str
    endpoint_id: str
    copy_id: str
    copy_index: int
    engine: EngineSpec
    nodes: int
    gpus_per_node: int
    gpu_memory_gb: float
    model_dir: str
    volume: str | None = None
    model_digest: str | None = None  # a registered model's bytes: placement prefers nodes that hold them
    revision: int = 1  # the workflow revision whose definition this copy runs
    slurm: SlurmPick | None = None  # where Slurm places copies: the values' partition, account and time limit
    sites: SitePlacement | None = None  # where the pool's copies may go (issue 36): the values' site rules
    owner: str = ""  # the user whose copy it is: whose own uid its ranks run as (activities/rank_identities.py)
    parent_workflow_id: str
    # Unused by the workflows: the pool's budgets (ReplaceFailedCopies spent, the failure streak) live in
    # PoolCarry, which is what continue-as-new carries; a copy is never restarted by it.
    attempt: int = 0
    blocked_since_events: int = 0
    timings: CopyTimings = CopyTimings()


class HealthCheck(Payload):
    """Liveness of a running engine (what a Kubernetes livenessProbe is to a pod): `/health` at `url`
    every `interval_s`, each unanswered after `timeout_s` a failure; `failures_to_fail` in a row and the
    engine is hung."""

    url: str
    copy_id: str = ""  # whose published replica leaves routing while a probe fails
    interval_s: float = 5.0
    timeout_s: float = 2.0
    failures_to_fail: int = 3


class RankSpec(Payload):
    workflow_id: str
    copy_id: str
    rank: int
    nnodes: int
    engine: EngineSpec
    gpus_per_node: int
    gpus: tuple[int, ...]
    host: str
    port: int
    master_addr: str
    master_port: int
    model_dir: str
    log_name: str
    health: HealthCheck | None = None  # the leader (rank 0) probes its own engine; other ranks serve no HTTP
    devices: tuple[str, ...] = ()  # its placement's CUDA names for `gpus` (MIG slices' UUIDs); empty: the indices
    owner: str = ""  # whose uid the rank runs as (activities/rank_identities.py); empty (an older copy): its workflow's


class RankExit(Payload):
    rank: int
    node_id: str
    exit_code: int | None = None
    signal: int | None = None
    # exited | cancelled | agent-stopped | lost | spawn-failed | unhealthy | interrupted (stopped by its agent's
    # shutdown, as a restarted agent found recorded on the node: the "agent-stopped" result could not be delivered)
    reason: str = "exited"
    log_tail: str = ""
    signal_name: str = ""  # filled by the node activity: workflow code cannot use the signal module
    note: str = ""  # what else the copy should say (e.g. why the exit status is unknown)

    @property
    def interrupted(self) -> bool:
        """Stopped by its node agent's shutdown: the copy is placed again, not failed."""
        return self.reason in ("agent-stopped", "interrupted")

    def describe(self) -> str:
        where = f"rank {self.rank} on node {self.node_id}"
        if self.reason == "lost":
            text = f"{where} was lost (its node agent stopped answering)"
        elif self.reason in ("agent-stopped", "interrupted"):
            text = f"{where} was stopped because its node agent shut down"
        elif self.reason == "spawn-failed":
            text = f"{where} could not be started"
        elif self.reason == "unhealthy":
            text = f"{where} was stopped: its engine stopped answering"
        elif self.reason == "cancelled":
            text = f"{where} was stopped with its copy"
        elif self.signal is not None:
            text = f"{where} was killed by signal {self.signal} ({self.signal_name or 'unknown'})"
        elif self.exit_code is not None:
            text = f"{where} exited with status {self.exit_code}"
        else:
            text = f"{where} exited (exit status unknown)"
        return f"{text}: {self.note}" if self.note else text


class ReadyCheck(Payload):
    url: str
    model_id: str
    timeout_s: float = 1800
    # Whose API key /v1/models wants (the node derives it), and whose rank 0 must own the listening
    # socket; "" = neither (histories from before both checks).
    copy_id: str = ""


class CopyResult(Payload):
    copy_id: str
    status: CopyStatus
    failure: RankExit | None = None
    message: str = ""

    def rank_end(self) -> RankEnd | None:
        """The rank that ended the copy, as the pool's event keeps it (None: no rank ended it, e.g. never ready)."""
        failure = self.failure
        if failure is None:
            return None
        return RankEnd(rank=failure.rank, node_id=failure.node_id, exit_code=failure.exit_code, signal=failure.signal,
                       reason=failure.reason)


class WeightsInput(Payload):
    workflow_id: str
    job: WeightsJob
    owner: str = Field("", description="Whose secrets HfTokenSecret resolves against")


class CleanupInput(Payload):
    workflow_id: str
    endpoint_id: str
    ephemeral_dir: str | None = None


class ScaleRequest(Payload):
    """Set a pool's desired size: by hand (`berth workflow scale`), by the autoscaler, or a wake-up."""

    replicas: int
    reason: str = ""
    source: str = "manual"  # manual | autoscaler | wake | drain
    grace_s: float | None = None  # copies scaled in get this long for in-flight requests (None: DrainGrace)


class ScaleResult(Payload):
    previous: int
    desired: int
    message: str


class DrainInput(Payload):
    """Stop routing new requests to a copy, then wait (up to the grace) for its in-flight ones."""

    copy_id: str
    url: str | None = None
    grace_s: float = 30.0


class DrainResult(Payload):
    drained: bool  # in-flight requests finished within the grace (False: the grace ran out)
    waited_s: float = 0.0


class FrontRun(Payload):
    """A long-running service a node agent owns (the LiteLLM proxy now; the gateway and OpenCode later).

    The node builds argv, environment and config from `kind` and `options`; credentials are resolved on
    the node (`api_key_secret`) or carried here (`api_key`, a literal or generated key: Temporal's
    payload codec encrypts it, so no history shows it)."""

    workflow_id: str
    endpoint_id: str
    name: str = Field(description="Job name: logs/workflows/<wf>/<name>/<name>.log")
    kind: str = Field(description="litellm")
    owner: str = Field(description="Whose secrets api_key_secret resolves against")
    address: str
    port: int
    options: dict[str, str] = Field(default_factory=dict)
    api_key: str | None = None
    api_key_secret: str | None = None
    password: str | None = Field(default=None, description="OpenCode's server password (encrypted in the history)")
    endpoint_url: str = Field(default="", description="The service's own stable Berth URL, for the show-server job")

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


class FrontExit(Payload):
    name: str
    node_id: str
    exit_code: int | None = None
    signal: int | None = None
    log_tail: str = ""
    reason: str = "exited"  # exited | lost (adopt_service found it gone)
    note: str = ""  # what else to say (e.g. why the exit status is unknown)

    def describe(self) -> str:
        if self.reason == "lost":
            how = "was lost (its node agent stopped answering)"
        elif self.signal is not None:
            how = f"was killed by signal {self.signal}"
        elif self.exit_code is not None:
            how = f"exited with status {self.exit_code}"
        else:
            how = "exited (exit status unknown)"
        text = f"service {self.name} on node {self.node_id} {how}"
        return f"{text}: {self.note}" if self.note else text


class LiveCheck(Payload):
    url: str
    path: str = "/health/liveliness"
    timeout_s: float = 180
    unauthorized_is_live: bool = False  # a password-protected server (OpenCode) answers 401 when up


class FrontInput(Payload):
    """What FrontWorkflow runs: its pool's signed input (whose front process it keeps) and the pool's ID."""

    service: PoolInput
    parent_workflow_id: str


class FrontReport(Payload):
    """What a front process did, as FrontWorkflow tells its pool: an event, its routing, its end."""

    kind: str = ""  # an event to record ("" = none)
    message: str = ""
    last_error: str | None = None
    ready: bool | None = None  # the endpoint now routes to it (True) or not (False); None = unchanged
    restarted: bool = False
    failed: bool = False  # a fatal configuration error: it is not started again
    ended: bool = False  # FrontWorkflow's last report


class PoolCarry(Payload):
    """A PoolWorkflow's state across continue-as-new: its running copies and front child are re-attached
    by ID (they were started with ParentClosePolicy.ABANDON, so the new run finds them still running)."""

    phase: Phase
    events: tuple[Event, ...] = ()
    copies: tuple[CopyInfo, ...] = ()
    running: tuple[str, ...] = ()  # copy workflow IDs still running
    reported: tuple[CopyResult, ...] = ()  # ends that running copies reported to the run before
    draining: tuple[str, ...] = ()
    desired: int = 1
    next_copy: int = 0
    replaced_failures: int = 0
    failure_streak: tuple[str, ...] = ()
    streak_replaced: int = 0
    replace_paused_until: datetime | None = None
    last_error: str | None = None
    weights: WeightsResult | None = None
    model_dir: str = ""
    service_ready: bool = False
    service_restarts: int = 0
    front_id: str | None = None  # the running FrontWorkflow, if any
    continued: int = 0  # how many times this pool has continued as new
    revision: int = 1  # the revision it serves (a pool never continues as new mid-rollout)
    revision_of: dict[str, int] = {}
    ready_since: dict[str, datetime] = {}
    rollout: Rollout | None = None  # the last rollout (finished), for its status
    rolled_back: tuple[int, ...] = ()  # revisions rolled back, for their listing


PoolInput.model_rebuild()
