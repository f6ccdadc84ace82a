"""The control plane's SQL tables (SQLAlchemy 2 ORM; SQLite by default, Postgres when several hosts).

A change here is also a new revision in server/store/migrations/versions/ (the store opens at its head);
tests/server/store/test_migrations.py fails while the two disagree."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class UserRow(Base):
    __tablename__ = "users"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    org: Mapped[str] = mapped_column(String(128))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class GroupRow(Base):
    __tablename__ = "groups"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    org: Mapped[str] = mapped_column(String(128))


class MembershipRow(Base):
    __tablename__ = "memberships"
    user: Mapped[str] = mapped_column(String(128), primary_key=True)
    group: Mapped[str] = mapped_column(String(128), primary_key=True)


class WorkflowRow(Base):
    __tablename__ = "workflows"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    entry: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128))
    org: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    # Encrypted at rest: the definition may hold an ApiKey or a generated key.
    definition: Mapped[str] = mapped_column(Text)
    values: Mapped[str] = mapped_column(Text, default="")
    endpoint_id: Mapped[str] = mapped_column(String(64))
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False)


class RevisionRow(Base):
    """One revision of a workflow (issue 17): revision 1 is its start; each update writes the next."""

    __tablename__ = "workflow_revisions"
    workflow_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    # Encrypted at rest, as WorkflowRow.definition: it may hold an ApiKey or a generated key.
    definition: Mapped[str] = mapped_column(Text)
    values: Mapped[str] = mapped_column(Text, default="")
    by: Mapped[str] = mapped_column(String(128))
    at: Mapped[float] = mapped_column(Float)
    strategy: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class EndpointRow(Base):
    __tablename__ = "endpoints"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(String(128), index=True)
    service: Mapped[str] = mapped_column(String(64))
    scope: Mapped[str] = mapped_column(String(32))
    owner: Mapped[str] = mapped_column(String(128))
    org: Mapped[str] = mapped_column(String(128))
    groups: Mapped[list[str]] = mapped_column(JSON, default=list)
    model_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    # Where the endpoint's own service listens (e.g. its LiteLLM proxy); None = route to replicas.
    service_url: Mapped[str | None] = mapped_column(String(512), nullable=True)
    annotations: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ReplicaRow(Base):
    __tablename__ = "replicas"
    copy_id: Mapped[str] = mapped_column(String(160), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(String(64), index=True)
    workflow_id: Mapped[str] = mapped_column(String(128), index=True)
    url: Mapped[str] = mapped_column(String(512))
    ready: Mapped[bool] = mapped_column(Boolean, default=True)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[float] = mapped_column(Float)
    revision: Mapped[int] = mapped_column(Integer, default=1)  # the workflow revision the copy serves


class NodeRow(Base):
    __tablename__ = "nodes"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    address: Mapped[str] = mapped_column(String(256))
    engine: Mapped[str] = mapped_column(String(32))
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    taints: Mapped[list[str]] = mapped_column(JSON, default=list)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    cpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_gb: Mapped[float] = mapped_column(Float, default=0)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    last_heartbeat: Mapped[float] = mapped_column(Float, index=True)  # placement asks which nodes are offline
    port_start: Mapped[int] = mapped_column(Integer)
    port_end: Mapped[int] = mapped_column(Integer)
    volumes: Mapped[list[str]] = mapped_column(JSON, default=list)
    # The digests the node's managed model cache holds (its heartbeat says): placement's cache hits, and
    # ModelRecord.cached. None on rows from before the model registry.
    models: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    # The placement transaction that last changed what placement reads of this node (its GPUs, taints, volumes,
    # models, draining, the GPUs held on it): server/store/placement_view.py re-reads the nodes above its own.
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0", index=True)


class AllocationRow(Base):
    """One GPU held by one copy; the unique constraint makes double-booking impossible."""

    __tablename__ = "allocations"
    __table_args__ = (UniqueConstraint("node_id", "gpu_index"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(String(128))
    gpu_index: Mapped[int] = mapped_column(Integer)
    copy_id: Mapped[str] = mapped_column(String(160), index=True)
    # Held for a copy that ended with a rank lost (its agent gone, the process maybe alive): freed only
    # when the node confirms the process is gone, never by the copy's release.
    fenced: Mapped[bool | None] = mapped_column(Boolean, nullable=True)


class PortRow(Base):
    __tablename__ = "ports"
    __table_args__ = (UniqueConstraint("node_id", "port"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(String(128))
    port: Mapped[int] = mapped_column(Integer)
    owner: Mapped[str] = mapped_column(String(160), index=True)
    fenced: Mapped[bool | None] = mapped_column(Boolean, nullable=True)  # as AllocationRow.fenced


class ReservationRow(Base):
    __tablename__ = "reservations"
    copy_id: Mapped[str] = mapped_column(String(160), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(String(128), index=True)
    placement: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)


class SecretRow(Base):
    __tablename__ = "secrets"
    ref: Mapped[str] = mapped_column(String(300), primary_key=True)  # secret://user/alice/NAME form
    scope: Mapped[str] = mapped_column(String(32))
    owner: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128))
    type: Mapped[str] = mapped_column(String(32))
    ciphertext: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    # Who may change or delete a shared (group/organization) secret besides an administrator. None on
    # rows made before Berth recorded it: only an administrator may change those.
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class ApiTokenRow(Base):
    """An API token Berth issued or saw (by its `jti`, never the token), and whether it was revoked."""

    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(128), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    note: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    minted_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    revoked_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class TokenCutoffRow(Base):
    """`berth token revoke --all --user NAME`: every API token of the user issued before `not_before`
    is refused, recorded or not."""

    __tablename__ = "token_cutoffs"
    user: Mapped[str] = mapped_column(String(128), primary_key=True)
    not_before: Mapped[float] = mapped_column(Float)
    by: Mapped[str] = mapped_column(String(128))


class EndpointTokenRow(Base):
    """An endpoint token Berth minted (by its `jti`, never the token): whom it names, who asked for it, and
    whether it was revoked (server/store/endpoint_tokens.py). The endpoint proxies learn the revoked ids of
    unexpired tokens from the routes table; a row is dropped a day after its token expired."""

    __tablename__ = "endpoint_tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(String(64), index=True)
    user: Mapped[str] = mapped_column(String(128))  # whom the token names (its `sub`)
    minted_by: Mapped[str] = mapped_column(String(128))  # who asked for it: the user, or a service's minter
    note: Mapped[str] = mapped_column(String(200), default="")
    minted_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    revoked_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class LoadReportRow(Base):
    """One load report an API process received: the requests the endpoint proxy admitted since its last
    report, or a LiteLLM worker's running total. Kept only for the autoscaler's window (server/store/load_reports.py),
    so whichever API replica a report reaches, the one autoscaler reads them all."""

    __tablename__ = "load_reports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    endpoint_id: Mapped[str] = mapped_column(String(64), index=True)
    source: Mapped[str] = mapped_column(String(16))  # server.store.load_reports.Source
    at: Mapped[float] = mapped_column(Float, index=True)  # wall clock of the API process that received it
    requests: Mapped[int] = mapped_column(BigInteger)
    # LiteLLM only: which worker counted (its totals are per worker), and the copies it routes to now.
    worker_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    worker_started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    routed: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)


class CopyOutcomeRow(Base):
    """How one copy answered the requests one endpoint proxy sent it between two load reports: what a
    canary's revision is judged on (server/store/copy_outcomes.py). Kept for an hour."""

    __tablename__ = "copy_outcomes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    endpoint_id: Mapped[str] = mapped_column(String(64), index=True)
    copy_id: Mapped[str] = mapped_column(String(160))
    revision: Mapped[int] = mapped_column(Integer)  # the copy's revision when the report came in
    at: Mapped[float] = mapped_column(Float, index=True)
    requests: Mapped[int] = mapped_column(BigInteger)
    errors: Mapped[int] = mapped_column(BigInteger)
    ttft_sum_s: Mapped[float] = mapped_column(Float)
    ttft_count: Mapped[int] = mapped_column(BigInteger)


class StoreLockRow(Base):
    """A named lock every API process takes through the store: `placement` (an UPDATE of its row serialises
    placements across processes on Postgres and SQLite alike) and `autoscaler` (a lease: one holder at a
    time, until `expires_at`)."""

    __tablename__ = "store_locks"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(128), nullable=True)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # `placement`'s: each transaction that takes the lock draws the next (server/store/placement_view.py)
    generation: Mapped[int | None] = mapped_column(Integer, nullable=True)


class AuditBatchRow(Base):
    """One batch of the audit chain as an endpoint proxy posted it (server/store/audit.py): facts, never content.
    Record `first_seq + i` is line i of `records` (its canonical JSON, server/store/audit_text.py) and characters
    64·i to 64·(i+1) of `hashes`; its hash = SHA-256(the record before's hash + its line), the first's before it
    being `prev_hash`, the previous batch's `tip_hash`. One row a batch, not a row a record: appending is the API's
    part of every proxied request, and a row with its indexes cost more than the rest of a record's work.
    (`writer`, `writer_batch`) names the batch as its writer sent it, so a batch sent again is not stored twice."""

    __tablename__ = "audit_batches"
    __table_args__ = (UniqueConstraint("writer", "writer_batch", name="uq_audit_batches_writer"),)
    number: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    writer: Mapped[str] = mapped_column(String(64))
    writer_batch: Mapped[int] = mapped_column(BigInteger)
    first_seq: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer)
    prev_hash: Mapped[str] = mapped_column(String(64))
    tip_hash: Mapped[str] = mapped_column(String(64))
    records: Mapped[str] = mapped_column(Text)
    hashes: Mapped[str] = mapped_column(Text)


class AuditTallyRow(Base):
    """What one audit batch holds for one (minute, endpoint, copy, key, user): how many records of each phase and
    their tokens. It finds the batches a filtered listing reads, and sums requests and tokens without reading
    records; derived from the batch's records in the same transaction."""

    __tablename__ = "audit_tallies"
    batch: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    ordinal: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    minute: Mapped[int] = mapped_column(BigInteger, index=True)  # Unix time // 60 of the records
    endpoint_id: Mapped[str] = mapped_column(String(128), index=True)
    copy_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    key_id: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    user: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    attempts: Mapped[int] = mapped_column(Integer)
    successes: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)
    tokens_in: Mapped[int] = mapped_column(BigInteger)
    tokens_out: Mapped[int] = mapped_column(BigInteger)
    # Its SUCCESS records' latencies as `bucket:count` pairs (server/store/latency_buckets.py); None: none, or a
    # tally written before migration 0012.
    latency_buckets: Mapped[str | None] = mapped_column(Text, nullable=True)


class ApiKeyRow(Base):
    """A Berth API key (`bk_<prefix>_<secret>`): found by its prefix, checked against `hash` (HMAC-SHA256
    hex under the server secret, never the key); after a rotation the previous secret's hash works until
    `previous_valid_until`. The creator's identity is copied in: the key speaks for them."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    prefix: Mapped[str] = mapped_column(String(32), unique=True, index=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128), index=True)
    org: Mapped[str] = mapped_column(String(128))
    groups: Mapped[list[str]] = mapped_column(JSON, default=list)
    endpoint_id: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    hash: Mapped[str] = mapped_column(String(64))
    previous_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    previous_valid_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    request_quota: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    requests_used: Mapped[int] = mapped_column(BigInteger, default=0)
    tokens_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_concurrent: Mapped[int | None] = mapped_column(Integer, nullable=True)


class ModelRow(Base):
    """A registered model (server/store/model_registry.py): its source, what its jobs found (commit, digest,
    sizes, verification) and its current (or last) job. `signature` is kept for the job that checks it and
    never shown (ModelRecord.signed only); `hf_token_secret` is a reference, resolved on the node."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("scope", "owner_key", "name", name="uq_models_scope_owner_name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    scope: Mapped[str] = mapped_column(String(32))
    owner_key: Mapped[str] = mapped_column(String(128))  # the user, group or organization the name is in
    owner: Mapped[str] = mapped_column(String(128))  # who registered it
    org: Mapped[str] = mapped_column(String(128))
    groups: Mapped[list[str]] = mapped_column(JSON, default=list)
    source: Mapped[str] = mapped_column(String(1024))
    repo: Mapped[str | None] = mapped_column(String(256), nullable=True)
    revision: Mapped[str | None] = mapped_column(String(128), nullable=True)
    path: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    commit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    state: Mapped[str] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    require_checksum: Mapped[bool] = mapped_column(Boolean, default=False)
    signature: Mapped[str | None] = mapped_column(String(64), nullable=True)
    license: Mapped[str | None] = mapped_column(String(128), nullable=True)
    residency: Mapped[str | None] = mapped_column(String(64), nullable=True)
    format: Mapped[str] = mapped_column(String(32))
    hf_token_secret: Mapped[str | None] = mapped_column(String(300), nullable=True)
    allow_patterns: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    ignore_patterns: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    safetensors_files: Mapped[int] = mapped_column(Integer, default=0)
    verified: Mapped[bool] = mapped_column(Boolean, default=False)
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    job_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    job_started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    materialized_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    verified_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class ModelUseRow(Base):
    """A running workflow serving a model: the model is not removed, nor its digest evicted, meanwhile."""

    __tablename__ = "model_uses"
    model_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(String(128), primary_key=True, index=True)
    since: Mapped[float] = mapped_column(Float)


class ReadyCopySampleRow(Base):
    """How many of a pool endpoint's copies were ready and not draining in one minute, as the autoscaler's tick
    found them: the ready-copies line of an endpoint's history (server/store/endpoint_history.py). Kept 6 hours."""

    __tablename__ = "ready_copy_samples"
    endpoint_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False, index=True)
    ready: Mapped[int] = mapped_column(Integer)


# Postgres: a 64-bit identity (an event stream outlives 2^31 rows); SQLite: INTEGER, its rowid, the only column type
# SQLite's AUTOINCREMENT takes.
EVENT_ID = BigInteger().with_variant(Integer(), "sqlite")


class EventRow(Base):
    """A cluster event (server/store/events.py): its kind, subjects and one line, with who may read it — `owner`,
    `org`, `groups` (written `|a|b|` so that a group matches with one LIKE on every database) and `scope` (a
    berth.scopes.Scope: user, group, organization, public), as an endpoint's scope reads. Ids are never reused
    (SQLite AUTOINCREMENT; a Postgres sequence), so `id` is a reader's cursor even after pruning."""

    __tablename__ = "events"
    __table_args__ = {"sqlite_autoincrement": True}
    id: Mapped[int] = mapped_column(EVENT_ID, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    kind: Mapped[str] = mapped_column(String(64), index=True)
    message: Mapped[str] = mapped_column(String(300))
    workflow_id: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    copy_id: Mapped[str | None] = mapped_column(String(160), nullable=True, index=True)
    node_id: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    endpoint_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    actor: Mapped[str | None] = mapped_column(String(128), nullable=True)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    org: Mapped[str | None] = mapped_column(String(128), nullable=True)
    groups: Mapped[str] = mapped_column(Text, default="")
    scope: Mapped[str] = mapped_column(String(32))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class PolicyRow(Base):
    """A policy (docs/policies.md): what a user, group or organization may deploy and hold. `rules` is the
    PolicyRules contract as JSON: the rules grow without a migration each."""

    __tablename__ = "policies"
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)  # user | group | organization
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    rules: Mapped[dict[str, Any]] = mapped_column(JSON)
    set_by: Mapped[str] = mapped_column(String(128))
    set_at: Mapped[float] = mapped_column(Float)


class CopySpanRow(Base):
    """One placement of one copy, from its reservation to its release (server/store/copy_spans.py): what usage's
    GPU-seconds reserved and ready are summed from (server/store/usage.py). Reservations are deleted on release;
    a span stays. A copy placed again gets a new span. Owner and organization are copied in at reservation: usage
    of a user later moved or removed stays theirs."""

    __tablename__ = "copy_spans"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    copy_id: Mapped[str] = mapped_column(String(160), index=True)
    workflow_id: Mapped[str] = mapped_column(String(128), index=True)
    endpoint_id: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128), index=True)
    org: Mapped[str] = mapped_column(String(128))
    gpus: Mapped[int] = mapped_column(Integer)  # every rank's GPUs together
    reserved_at: Mapped[float] = mapped_column(Float, index=True)
    ready_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # first published ready
    released_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)


class UsageBudgetRow(Base):
    """A token and/or GPU-hour budget for an organization or a group, per day or month (UTC), set by an
    administrator (server/store/usage_budgets.py)."""

    __tablename__ = "usage_budgets"
    scope: Mapped[str] = mapped_column(String(16), primary_key=True)  # "org" or "group"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    period: Mapped[str] = mapped_column(String(16), primary_key=True)  # "day" or "month"
    tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # tokens in + out
    gpu_hours: Mapped[float | None] = mapped_column(Float, nullable=True)  # reserved GPU-hours
    set_by: Mapped[str] = mapped_column(String(128))
    set_at: Mapped[float] = mapped_column(Float)


class UsageAlertRow(Base):
    """A budget seen exceeded in one period: written once (its key is the primary key), so the "budget exceeded"
    event is raised once per budget, period and figure, whichever API process saw it first."""

    __tablename__ = "usage_alerts"
    scope: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    period: Mapped[str] = mapped_column(String(16), primary_key=True)
    period_start: Mapped[float] = mapped_column(Float, primary_key=True)
    figure: Mapped[str] = mapped_column(String(16), primary_key=True)  # "tokens" or "gpu_hours"
    at: Mapped[float] = mapped_column(Float)


class CopyScrapeRow(Base):
    """How fresh a copy's /metrics figures were at the endpoint proxy that last reported it (server/store/
    copy_scrapes.py), on the API's clock: what `berth explain routing` judges staleness on. Rows unreported for an
    hour are pruned."""

    __tablename__ = "copy_scrapes"
    copy_id: Mapped[str] = mapped_column(String(160), primary_key=True)
    scraped_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    failed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    reported_at: Mapped[float] = mapped_column(Float, index=True)
