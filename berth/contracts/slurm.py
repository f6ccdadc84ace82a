"""The Slurm cluster's nodes as `berth node list` shows them on a cluster whose placement backend is Slurm
(issue 35): read-only, as `scontrol show node` reports them."""

from __future__ import annotations

from typing import Literal

from berth.contracts.base import Response


class SlurmNodeView(Response):
    name: str
    state: str  # Slurm's: IDLE, MIXED, ALLOCATED, DOWN+DRAIN, …
    address: str  # NodeAddr
    hostname: str
    partitions: list[str]
    gres: str  # e.g. gpu:a100:4
    gpus: int
    cpus: int
    memory_mb: int


class SlurmNodes(Response):
    """Slurm's nodes; none where Berth's own node agents place copies (`backend` says which)."""

    backend: Literal["berth", "slurm"]
    nodes: list[SlurmNodeView]
