"""The model registry's contracts: a model registered once (`berth model add`), materialized once per
digest by a durable model job (Registered → Resolving → Downloading → Verifying → Scanning → Ready, or
Failed), verified, and kept in the managed cache; and the reports a model job sends the control plane."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from berth.contracts.base import Payload, Response
from berth.contracts.choices import ModelFormat, ModelScope  # re-exported: defined apart for the CLI

# Names as workflows and secrets have them; `model://NAME` names one (user scope first, then the caller's
# groups, then the organization).
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# A glob over a repository's relative paths (fnmatch, as huggingface_hub's allow/ignore patterns).
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]


class ModelState(StrEnum):
    REGISTERED = "Registered"  # recorded; no job has run (or the cache evicted its bytes)
    RESOLVING = "Resolving"  # revision → commit, file list and sizes
    DOWNLOADING = "Downloading"
    VERIFYING = "Verifying"  # every file's SHA-256 against the source's published checksums; the digest
    SCANNING = "Scanning"  # file count, refused formats (pickles), signature
    READY = "Ready"
    FAILED = "Failed"

    @staticmethod
    def working() -> frozenset[ModelState]:
        return frozenset({ModelState.RESOLVING, ModelState.DOWNLOADING, ModelState.VERIFYING,
                          ModelState.SCANNING})


class ModelCreate(Payload):
    """POST /v1/models. `source` is hf://org/name[@revision] or an absolute path of a pre-staged
    directory under an allowed model dir (BERTH_MODEL_DIRS)."""

    name: str = Field(pattern=MODEL_NAME_PATTERN)
    source: str = Field(min_length=1, max_length=1024)
    scope: ModelScope = ModelScope.USER
    group: str | None = Field(None, max_length=128, description="For scope=group: which of your groups")
    require_checksum: bool = Field(False, description="Refuse a materialization any file of which the "
                                   "source publishes no checksum for")
    signature: str | None = Field(None, pattern=DIGEST_PATTERN, description="HMAC-SHA256 hex of the "
                                  "digest under the cluster's model signing key")
    license: str | None = Field(None, max_length=128)
    residency: str | None = Field(None, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    format: ModelFormat = ModelFormat.SAFETENSORS
    hf_token_secret: str | None = Field(None, max_length=300, description="secret://…/NAME of type hf, "
                                        "for gated and private repositories")
    # Which of an hf:// repository's files the model is (huggingface_hub's allow/ignore patterns): a repo that
    # ships `original/` weights or a stray pickle beside its safetensors is materialized without them.
    allow_patterns: list[Pattern] = Field(default_factory=list, max_length=32)
    ignore_patterns: list[Pattern] = Field(default_factory=list, max_length=32)


class ModelProgress(Payload):
    """A download's progress as the node reports it (at most about once a second)."""

    bytes_done: int = Field(0, ge=0)
    bytes_total: int = Field(0, ge=0)
    rate_bps: float = Field(0.0, ge=0)
    eta_s: float | None = None
    files_done: int = Field(0, ge=0)
    files_total: int = Field(0, ge=0)


class ModelRecord(Response):
    """A registered model as GET /v1/models/{name} answers it."""

    id: str
    name: str
    scope: ModelScope
    owner: str  # the user who registered it
    owner_key: str  # the user, group or organization the name belongs to
    source: str
    repo: str | None = None  # hf:// sources
    revision: str | None = None
    path: str | None = None  # pre-staged sources
    commit: str | None = None  # the revision resolved, once a job has resolved it
    digest: str | None = None  # SHA-256 of the sorted manifest, once materialized
    state: ModelState = ModelState.REGISTERED
    message: str | None = None  # why it failed, durable
    retries: int = 0  # attempts of the current job beyond the first
    require_checksum: bool = False
    signed: bool = False  # a signature is set (the signature itself is not shown)
    verified: bool = False  # every file matched a checksum the source published
    license: str | None = None
    residency: str | None = None
    format: ModelFormat = ModelFormat.SAFETENSORS
    allow_patterns: list[str] = Field(default_factory=list)
    ignore_patterns: list[str] = Field(default_factory=list)
    size_bytes: int = 0
    files: int = 0
    safetensors_files: int = 0
    cached: bool = False  # its digest's bytes are in the managed cache now
    progress: ModelProgress | None = None
    job_id: str | None = None
    referenced_by: list[str] = Field(default_factory=list)  # running workflows that serve it
    created_at: float
    updated_at: float
    materialized_at: float | None = None
    verified_at: float | None = None
    last_used_at: float | None = None


class ModelJobRecord(Response):
    """GET /v1/model-jobs: a model's current (or last) job."""

    job_id: str
    model: str
    model_id: str
    kind: str  # materialize | verify
    state: ModelState
    message: str | None = None
    retries: int = 0
    progress: ModelProgress | None = None
    started_at: float
    updated_at: float


class JobStarted(Response):
    """POST /v1/models/{name}/materialize|verify: the job recorded (or joined: `joined` true)."""

    model: str
    job_id: str
    state: ModelState
    joined: bool = False


class EvictRequest(Payload):
    budget_bytes: int | None = Field(None, ge=0, description="Keep the cache under this many bytes; "
                                     "None: the cluster's BERTH_MODEL_CACHE_BYTES")


class EvictedDigest(Response):
    digest: str
    bytes: int
    models: list[str] = Field(default_factory=list)


class EvictResult(Response):
    budget_bytes: int
    before_bytes: int
    after_bytes: int
    evicted: list[EvictedDigest] = Field(default_factory=list)
    kept_referenced: list[str] = Field(default_factory=list)  # digests kept because a workflow serves them


# --- what a model job reports (internal routes, the job's activities → the control plane) -----------------

class ModelStateReport(Payload):
    """PUT /internal/models/{id}/state: a job's step, or its end. Fields left None are left as they are."""

    job_id: str
    state: ModelState
    message: str | None = Field(default=None, max_length=2000)
    retries: int | None = None
    commit: str | None = None
    digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    verified: bool | None = None
    size_bytes: int | None = Field(default=None, ge=0)
    files: int | None = Field(default=None, ge=0)
    safetensors_files: int | None = Field(default=None, ge=0)


class ModelProgressReport(Payload):
    """PUT /internal/models/{id}/progress."""

    job_id: str
    progress: ModelProgress


class ModelUse(Payload):
    """POST /internal/models/use: a workflow about to serve `ref` (model://NAME, or hf://… registered on
    first use) as `user`; answers the record and starts or joins its job unless it is Ready."""

    ref: str = Field(max_length=1200)
    user: str
    workflow_id: str


class ModelUseAnswer(Response):
    model: ModelRecord
    model_dir: str | None = None  # the digest's directory when Ready
    job_id: str | None = None


class ModelJobSpec(Response):
    """GET /v1/internal/models/{id}: what a model job needs besides the record: the signature to check (not
    a secret, but never shown to users) and the reference of the token a gated repository is fetched with
    (resolved on the node that downloads, never here)."""

    model: ModelRecord
    signature: str | None = None
    hf_token_secret: str | None = None
    job_kind: str | None = None  # materialize | verify, of the current job


class ModelRelease(Payload):
    """POST /v1/internal/models/release: a workflow that serves its model no longer (it ended)."""

    workflow_id: str = Field(min_length=1, max_length=128)


class ModelReleased(Response):
    released: int  # how many of its models' uses were removed
