"""Workflow answers: started, listed, described (with the pool's status), its definition, stopped, scaled,
and its jobs' logs. The status parts mirror workflows/payloads.py on the wire (the ground floor may not
import it); the workflow's own models stay the source of truth for what the status query returns."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from berth.contracts.base import Number, OpenResponse, Payload, Response


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


class DownloadProgress(OpenResponse):
    """The weights download's last heartbeat (workflows.payloads.DownloadProgress)."""

    bytes_done: int = 0
    bytes_total: int = 0
    rate_bps: Number = 0
    eta_s: Number | None = None
    files_done: int = 0
    files_total: int = 0


class CopyState(OpenResponse):
    """One copy of the pool (workflows.payloads.ReplicaInfo)."""

    copy_id: str
    status: str
    url: str | None = None
    nodes: list[str] = []
    detail: str = ""


class WorkflowEvent(OpenResponse):
    at: str  # ISO 8601, as the workflow recorded it (the CLI shows it in local time)
    kind: str
    message: str
    copy_id: str | None = None


class WeightsView(OpenResponse):
    model_dir: str
    bytes_total: int = 0
    bytes_transferred: int = 0
    cache_hit: bool = False
    dry_run: bool = False


class WorkflowDescription(Response):
    """`workflow describe`: the stored facts, Temporal's status, then the pool's status query answer (or
    `phase: unknown` and a `note` when the query failed)."""

    id: str
    entry: str
    owner: str
    created_at: float
    endpoint: WorkflowEndpoint
    status: str | None = None
    download: DownloadProgress | None = None
    workflow_id: str | None = None
    phase: str | None = None
    desired_replicas: int | None = None
    replicas: list[CopyState] | None = None
    events: list[WorkflowEvent] | None = None
    last_error: str | None = None
    weights: WeightsView | None = None
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
class WorkflowScaleRequest(Payload):
    replicas: int
