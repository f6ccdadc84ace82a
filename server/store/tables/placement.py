"""Nodes and what copies hold on them: allocations, ports, reservations, and the lock row placement serializes on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from server.store.tables.base import Base


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


class MigSliceRow(Base):
    """A MIG slice of one of a node's GPUs (issue 36): the record is the truth placement goes by (server/store/
    mig_slices.py), whether or not a node agent made the instance (the `mig_apply` cluster setting)."""

    __tablename__ = "mig_slices"
    # One name, one device: two slices named alike would let two copies hold one MIG device (NULL: pending, any number)
    __table_args__ = (UniqueConstraint("uuid", name="uq_mig_slices_uuid"),)
    node_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    # The GPU index placement gives the slice on its node (an allocation's gpu_index), apart from the node's GPUs'.
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    gpu: Mapped[int] = mapped_column(Integer)  # the parent GPU's index
    profile: Mapped[str] = mapped_column(String(16))
    uuid: Mapped[str | None] = mapped_column(String(64), nullable=True)  # MIG-…; None: pending
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
