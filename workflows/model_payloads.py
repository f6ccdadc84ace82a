"""Payloads of model jobs (ModelJobWorkflow, ModelCacheWorkflow) and their activities. Sizes stay small:
a model's manifest (a line per file, up to the file cap) never travels through Temporal; the download
activity leaves it beside the staged bytes, where the check activity reads it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from berth.contracts import Payload
from berth.contracts.model_registry import ModelFormat, ModelState

JobKind = Literal["materialize", "verify"]


class ModelJobInput(Payload):
    model_id: str
    job_id: str
    kind: JobKind = "materialize"


class JobModel(Payload):
    """The model as its job sees it: read from the registry (berth.contracts.ModelJobSpec) when the job
    starts, flattened for the activities. `hf_token_secret` is a reference; the node resolves it."""

    model_id: str
    name: str
    owner: str
    source_kind: Literal["hf", "path"]
    repo: str | None = None
    revision: str | None = None
    path: str | None = None
    require_checksum: bool = False
    signature: str | None = None
    format: ModelFormat = ModelFormat.SAFETENSORS
    hf_token_secret: str | None = None
    allow_patterns: tuple[str, ...] = ()
    ignore_patterns: tuple[str, ...] = ()
    commit: str | None = None  # as an earlier job resolved it
    digest: str | None = None  # as an earlier job materialized it


class ModelStep(Payload):
    """report_model_state's input: the step a job is at (or how it ended), for the registry."""

    model_id: str
    job_id: str
    state: ModelState
    message: str | None = None
    retries: int | None = None
    commit: str | None = None
    digest: str | None = None
    verified: bool | None = None
    size_bytes: int | None = None
    files: int | None = None
    safetensors_files: int | None = None


class ResolveInput(Payload):
    job_id: str
    spec: JobModel


class ResolvedModel(Payload):
    commit: str  # a 40-hex commit for hf://; for a path source, "path"
    size_bytes: int
    files: int
    staged_path: str | None = None  # a path source, canonicalized (its bytes are never copied)


class DownloadInput(Payload):
    job_id: str
    spec: JobModel
    resolved: ResolvedModel


class DownloadedModel(Payload):
    """The download activity's result: where the bytes are staged and their digest (the manifest file lies
    beside them), whether every file matched a checksum the source published."""

    node_id: str
    staging: str
    digest: str
    size_bytes: int
    files: int
    bytes_transferred: int
    verified: bool
    unverified_files: list[str] = Field(default_factory=list)  # the first few
    cached: bool = False  # the digest was already in the cache: nothing was fetched


class CheckInput(Payload):
    job_id: str
    spec: JobModel
    downloaded: DownloadedModel


class CheckedModel(Payload):
    model_dir: str
    digest: str
    files: int
    safetensors_files: int
    size_bytes: int


class VerifyInput(Payload):
    job_id: str
    spec: JobModel


class VerifiedModel(Payload):
    ok: bool
    digest: str
    problems: list[str] = Field(default_factory=list)  # one line per changed, missing or extra file


class ModelUpdate(Payload):
    """The signal a model job sends each workflow waiting for it, when its state changes."""

    model_id: str
    name: str
    state: ModelState
    message: str | None = None
    digest: str | None = None
    model_dir: str | None = None


class EvictInput(Payload):
    budget_bytes: int
    referenced: list[str] = Field(default_factory=list)  # digests a running workflow serves
    names: dict[str, list[str]] = Field(default_factory=dict)  # digest → the models that name it
    last_used: dict[str, float] = Field(default_factory=dict)  # digest → when a workflow last took it


class UseInput(Payload):
    ref: str
    user: str
    workflow_id: str
