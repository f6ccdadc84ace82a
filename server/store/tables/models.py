"""The model registry: registered models and the workflows that use them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from server.store.tables.base import Base


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
