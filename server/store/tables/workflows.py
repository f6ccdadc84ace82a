"""Workflows, their revisions and endpoints, the replicas published for routing, and what the proxies and the
autoscaler report of them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from server.store.tables.base import Base


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


class ReadyCopySampleRow(Base):
    """How many of a pool endpoint's copies were ready and not draining in one minute, as the autoscaler's tick
    found them: the ready-copies line of an endpoint's history (server/store/endpoint_history.py). Kept 6 hours."""

    __tablename__ = "ready_copy_samples"
    endpoint_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False, index=True)
    ready: Mapped[int] = mapped_column(Integer)




class CopyScrapeRow(Base):
    """How fresh a copy's /metrics figures were at the endpoint proxy that last reported it (server/store/
    copy_scrapes.py), on the API's clock: what `berth explain routing` judges staleness on. Rows unreported for an
    hour are pruned."""

    __tablename__ = "copy_scrapes"
    copy_id: Mapped[str] = mapped_column(String(160), primary_key=True)
    scraped_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    failed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    reported_at: Mapped[float] = mapped_column(Float, index=True)
