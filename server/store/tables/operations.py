"""Operating a shared cluster: the audit chain and its tallies, events, policies, copy spans, usage budgets and
their alerts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from server.store.tables.base import Base

# Postgres: a 64-bit identity (an event stream outlives 2^31 rows); SQLite: INTEGER, its rowid, the only column type
# SQLite's AUTOINCREMENT takes.
EVENT_ID = BigInteger().with_variant(Integer(), "sqlite")


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
