"""Backup contracts (`GET /v1/admin/backup`, `POST /v1/admin/restore`): the control plane's desired state as one
versioned JSON document, a record per row of each table it keeps (docs/backup.md), and what a restore did.

Each record mirrors its table in server/store/tables/, column for column, with the column's length as
`max_length` (tests/server/store/test_backup.py holds the two together). What was encrypted at rest stays the
ciphertext it was: a workflow's definition and values, a secret's value; an API key is its HMAC, a token its ID."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field, model_validator

from berth.contracts.base import INT32_MAX, INT64_MAX, JsonScalars, Response

BACKUP_FORMAT: Final = "berth-backup"
BACKUP_VERSION: Final = 1  # a change to the records below is the next version, and a restore of each version it reads

Str16 = Annotated[str, Field(max_length=16)]
Str32 = Annotated[str, Field(max_length=32)]
Str64 = Annotated[str, Field(max_length=64)]
Str128 = Annotated[str, Field(max_length=128)]
Str200 = Annotated[str, Field(max_length=200)]
Str256 = Annotated[str, Field(max_length=256)]
Str300 = Annotated[str, Field(max_length=300)]
Str512 = Annotated[str, Field(max_length=512)]
Str1024 = Annotated[str, Field(max_length=1024)]
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Ciphertext = str  # base64 of AES-256-GCM under the state dir's data key (berth.security.Cipher)


class BackupPart(JsonScalars):
    """A part of the document: every field named, nothing else accepted (a typo in a hand-edited backup is refused,
    not dropped)."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())


class BackupUser(BackupPart):
    name: Str128
    org: Str128
    admin: bool
    created_at: float


class BackupGroup(BackupPart):
    name: Str128
    org: Str128


class BackupMembership(BackupPart):
    user: Str128
    group: Str128


class BackupWorkflow(BackupPart):
    id: Str128
    entry: Str128
    owner: Str128
    org: Str128
    created_at: float
    definition: Ciphertext
    values: str  # plain JSON where written at all (revisions keep the values, encrypted)
    endpoint_id: Str64
    stop_requested: bool


class BackupRevision(BackupPart):
    workflow_id: Str128
    revision: Int32
    definition: Ciphertext
    values: Ciphertext
    by: Str128
    at: float
    strategy: dict[str, Any]


class BackupEndpoint(BackupPart):
    id: Str64
    workflow_id: Str128
    service: Str64
    scope: Str32
    owner: Str128
    org: Str128
    groups: list[str]
    model_id: Str256 | None
    created_at: float
    service_url: Str512 | None
    annotations: dict[str, Any]  # its pool facts and policy (limits, key TTL cap) among them


class BackupSecret(BackupPart):
    ref: Str300
    scope: Str32
    owner: Str128
    name: Str128
    type: Str32
    ciphertext: Ciphertext
    created_at: float
    created_by: Str128 | None


class BackupApiToken(BackupPart):
    """An API token's record in the token registry (its `jti`, never the token)."""

    id: Str64
    user: Str128
    kind: Str32
    note: Str200
    created_at: float
    expires_at: float
    minted_by: Str128 | None
    revoked_at: float | None
    revoked_by: Str128 | None


class BackupTokenCutoff(BackupPart):
    user: Str128
    not_before: float
    by: Str128


class BackupEndpointToken(BackupPart):
    """An endpoint token's record (its `jti`, never the token)."""

    id: Str64
    endpoint_id: Str64
    user: Str128
    minted_by: Str128
    note: Str200
    minted_at: float
    expires_at: float
    revoked_at: float | None
    revoked_by: Str128 | None


class BackupApiKey(BackupPart):
    """An API key as the store keeps it: its prefix and HMAC (`hash`), never the key."""

    id: Str64
    prefix: Str32
    name: Str128
    owner: Str128
    org: Str128
    groups: list[str]
    endpoint_id: Str64
    model: Str256 | None
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    hash: Str64
    previous_hash: Str64 | None
    previous_valid_until: float | None
    request_quota: Count | None
    requests_used: Count
    tokens_per_minute: Int32 | None
    max_concurrent: Int32 | None


class BackupModel(BackupPart):
    """A model registry record (its facts and last job; never the model's bytes)."""

    id: Str64
    name: Str128
    scope: Str32
    owner_key: Str128
    owner: Str128
    org: Str128
    groups: list[str]
    source: Str1024
    repo: Str256 | None
    revision: Str128 | None
    path: Str1024 | None
    commit: Str64 | None
    digest: Str64 | None
    state: Str32
    message: str | None
    retries: Int32
    require_checksum: bool
    signature: Str64 | None
    license: Str128 | None
    residency: Str64 | None
    format: Str32
    hf_token_secret: Str300 | None  # a secret's reference, never its value
    allow_patterns: list[str] | None
    ignore_patterns: list[str] | None
    size_bytes: Count
    files: Int32
    safetensors_files: Int32
    verified: bool
    progress: dict[str, Any] | None
    job_id: Str128 | None
    job_kind: Str32 | None
    job_started_at: float | None
    created_at: float
    updated_at: float
    materialized_at: float | None
    verified_at: float | None
    last_used_at: float | None


class BackupModelUse(BackupPart):
    model_id: Str64
    workflow_id: Str128
    since: float


class BackupPolicy(BackupPart):
    """A user's, group's or organization's policy (docs/policies.md): its rules as the PolicyRules contract's JSON."""

    kind: Str16
    name: Str128
    rules: dict[str, Any]
    set_by: Str128
    set_at: float


class BackupTables(BackupPart):
    """The rows of each table in the backup, by table name (server/store/backup.py says why each is in or out)."""

    users: list[BackupUser] = []
    groups: list[BackupGroup] = []
    memberships: list[BackupMembership] = []
    workflows: list[BackupWorkflow] = []
    workflow_revisions: list[BackupRevision] = []
    endpoints: list[BackupEndpoint] = []
    secrets: list[BackupSecret] = []
    api_tokens: list[BackupApiToken] = []
    token_cutoffs: list[BackupTokenCutoff] = []
    endpoint_tokens: list[BackupEndpointToken] = []
    api_keys: list[BackupApiKey] = []
    models: list[BackupModel] = []
    model_uses: list[BackupModelUse] = []
    policies: list[BackupPolicy] = []  # absent from a document written before policies: none


class BackupKeys(BackupPart):
    """Which keys the document's ciphertexts, hashes and tokens need, told without giving any of them away: a
    restore refuses a control plane whose keys differ (its secrets would not decrypt, its keys and tokens would not
    verify)."""

    signing_key_id: Str64  # the `kid` of the key that signs tokens (public: the JWKS says it)
    data_key_check: Ciphertext  # a fixed text encrypted under the data key: only the same key decrypts it
    key_hash_check: Str64  # the HMAC of a fixed text under the API keys' server secret


class BackupDocument(BackupPart):
    """`berth admin backup`: the control plane's desired state, one document."""

    format: Literal["berth-backup"]
    version: Literal[1]  # BACKUP_VERSION: the one version this Berth reads
    created_at: float
    store_revision: Str64  # the store's schema (its Alembic head) when the backup was made; informational
    keys: BackupKeys
    tables: BackupTables

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any) -> Any:
        """Refuse another format or version before reading its tables: their shape may be anything then."""
        if isinstance(data, dict):
            if data.get("format") != BACKUP_FORMAT:
                raise ValueError("not a Berth backup (format is not 'berth-backup')")
            if data.get("version") != BACKUP_VERSION:
                raise ValueError(f"backup version {str(data.get('version'))[:12]} unknown; this Berth reads "
                                 f"{BACKUP_VERSION}")
        return data


class RestoredWorkflow(Response):
    """One restored workflow: its endpoint (the same ID and URL as before), and whether its pool was started."""

    id: str
    endpoint_id: str
    url: str
    started: bool  # started in Temporal now, or found running there (adopted)
    note: str | None = None  # why it was not started: it had been stopped, or Temporal's one-line refusal


class BackupRestored(Response):
    """`POST /v1/admin/restore`: the rows written per table, and each workflow's pool."""

    rows: dict[str, int]
    workflows: list[RestoredWorkflow]
