"""Workflow answers: started, listed, described (with the pool's status), its definition, stopped, scaled,
and its jobs' logs; and the pool's status parts, defined here once: the service workflow's `status` query
answers them over Temporal (workflows/payloads.py re-exports them) and `describe` carries them over REST,
so their field names are wire names twice over (running workflows' histories hold them)."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import Field

from berth.contracts.base import Number, Payload, Renamed, Response, formerly
from berth.contracts.rollouts import Rollout, ScalingExplanation


# --- the pool's status (Temporal payloads, shown by `describe`) -----------------------------------------
class Phase(str, Enum):
    """Where a service workflow is."""

    DOWNLOADING = "downloading"  # weights job running
    SCHEDULING = "scheduling"  # waiting for a placement for its copies
    STARTING = "starting"  # ranks started, waiting for health
    READY = "ready"  # at least one copy serves
    SCALED_TO_ZERO = "scaled_to_zero"  # pool at zero by choice; a request wakes it
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"

    @staticmethod
    def terminal() -> frozenset[Phase]:
        return frozenset({Phase.STOPPED, Phase.FAILED})


class CopyStatus(str, Enum):
    """Where one copy is."""

    SCHEDULING = "scheduling"  # waiting for nodes
    STARTING = "starting"  # ranks launched, not yet healthy
    READY = "ready"  # published, serving
    STOPPING = "stopping"
    STOPPED = "stopped"  # stopped on request
    FAILED = "failed"  # a rank ended; the copy was stopped as a unit
    INTERRUPTED = "interrupted"  # its node agent went away cleanly (berth down); re-placed


class RankEnd(Payload):
    """The rank whose end ended a copy, as its node agent reported it (workflows/payloads.py RankExit), kept on the
    pool's event so that `berth explain failure` reads it without parsing the message."""

    rank: int
    node_id: str
    exit_code: int | None = None  # None: killed by a signal, or not known (the message says why)
    signal: int | None = None
    # exited | cancelled | agent-stopped | lost | spawn-failed | unhealthy | interrupted (RankExit.reason)
    reason: str = "exited"


class Event(Payload):
    at: datetime  # as the workflow recorded it (ISO 8601 on the wire; the CLI shows it in local time)
    kind: str
    message: str
    copy_id: str | None = None
    # A copy's end (copy_failed, copy_interrupted): the rank that ended it. None on every other event, and on those
    # recorded before Berth kept it.
    ended: RankEnd | None = None


class CopyInfo(Payload):
    """One copy of the pool as the pool knows it."""

    copy_id: str
    status: CopyStatus
    url: str | None = None
    nodes: tuple[str, ...] = ()
    detail: str = ""
    revision: int = 1  # the workflow revision this copy serves (issue 17)


class WeightsResult(Payload):
    model_dir: str
    bytes_total: int = 0
    bytes_transferred: int = 0
    cache_hit: bool = False
    dry_run: bool = False
    # Which bytes the workflow serves (issue 16): the SHA-256 of their sorted manifest, and the registered
    # model they came from (model://NAME; an hf:// model is registered on first use). None: not known
    # (a dry run, or a workflow started before Berth recorded it).
    digest: str | None = None
    model: str | None = None


class DownloadProgress(Payload):
    """The weights download's heartbeat detail."""

    bytes_done: int = 0
    bytes_total: int = 0
    # Number: a rate or ETA sent as 80 reads back as 80, so `-o json` prints the bytes the API sent.
    rate_bps: Number = 0
    eta_s: Number | None = None
    files_done: int = 0
    files_total: int = 0


class PoolStatus(Payload, Renamed):
    """The answer to the `status` query. `desired_replicas` and `replicas` are the old names of
    `desired_copies` and `copies` (deprecated; still read, and emitted, for one release: a worker of the
    previous release answers with them)."""

    workflow_id: str
    phase: Phase
    desired_copies: int = formerly("desired_replicas", "desired_copies")
    copies: tuple[CopyInfo, ...] = formerly("replicas", "copies")
    events: tuple[Event, ...]
    last_error: str | None = None
    weights: WeightsResult | None = None
    revision: int = 1  # the revision the pool serves (a rollout's target becomes it when it completes)
    rollout: Rollout | None = None  # the current or last rollout
    rolled_back: tuple[int, ...] = ()  # revisions rolled back (they never served), newest last


# --- REST answers ----------------------------------------------------------------------------------------
class WorkflowStarted(Response):
    id: str
    endpoint_id: str
    url: str


class WorkflowSummary(Response):
    id: str
    entry: str
    owner: str
    created_at: float
    status: str
    phase: str
    endpoint_id: str


class WorkflowEndpoint(Response):
    """The workflow's endpoint as `describe` shows it; the notes are there only when they apply."""

    id: str
    url: str
    discoverable: bool | None = None
    openai_compatible: bool | None = None
    note: str | None = None
    token_lapses_at: float | None = None


class WorkflowDescription(Response, Renamed):
    """`workflow describe`: the stored facts, Temporal's status, then the pool's status query answer (or
    `phase: unknown` and a `note` when the query failed). `desired_replicas` and `replicas` are the old
    names of `desired_copies` and `copies` (deprecated; emitted too for one release)."""

    id: str
    entry: str
    owner: str
    created_at: float
    endpoint: WorkflowEndpoint
    status: str | None = None
    download: DownloadProgress | None = None
    workflow_id: str | None = None
    phase: str | None = None
    desired_copies: int | None = formerly("desired_replicas", "desired_copies", None)
    copies: tuple[CopyInfo, ...] | None = formerly("replicas", "copies", None)
    events: tuple[Event, ...] | None = None
    last_error: str | None = None
    weights: WeightsResult | None = None
    revision: int | None = None
    rollout: Rollout | None = None
    rolled_back: tuple[int, ...] | None = None  # revisions rolled back (they never served)
    scaling: ScalingExplanation | None = None  # the autoscaler's last decision and why (explain-scaling)
    note: str | None = None


class WorkflowDefinitionView(Response):
    id: str
    entry: str
    definition: dict[str, Any]  # the rendered WorkflowDefinition (catalog.definition owns its shape)


class WorkflowStopped(Response):
    id: str
    stop_requested: bool


class WorkflowScaled(Response):
    id: str
    previous: int
    desired: int
    message: str


class WorkflowLogs(Response):
    """Without `job`: the jobs that have logs. With it: the tail of that job's latest copy's log."""

    jobs: list[str] | None = None
    job: str | None = None
    # `copy` on the wire; a field of that name would hide BaseModel.copy.
    copy_name: str | None = Field(None, alias="copy")
    text: str | None = None


# --- requests ------------------------------------------------------------------------------------------
class WorkflowScaleRequest(Payload, Renamed):
    """`workflow scale --replicas N`: `copies` was `replicas` (deprecated; sent too for one release)."""

    copies: int = formerly("replicas", "copies")
