"""Node answers: a node's state after a heartbeat or a drain, and the node list with its GPUs."""

from __future__ import annotations

from berth.contracts.base import OpenResponse, Response


class NodeState(Response):
    id: str
    state: str


class GpuView(OpenResponse):
    """One GPU: what the node agent reported (NVML's facts, open), plus who holds it and its id."""

    index: int
    allocated_to: str | None = None
    memory_free_gb: float | None = None
    id: str | None = None


class NodeView(Response):
    id: str
    state: str
    address: str
    engine: str
    gpus: list[GpuView]
    allocated: int
    cpus: int
    memory_gb: float
    labels: dict[str, str]
    taints: list[str]
    draining: bool
    last_heartbeat: float
