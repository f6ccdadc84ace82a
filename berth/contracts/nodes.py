"""Node answers: a node's state after a heartbeat or a drain, and the node list with its GPUs."""

from __future__ import annotations

from berth.contracts.base import Number, OpenResponse, Response


class NodeState(Response):
    id: str
    state: str


class GpuView(OpenResponse):
    """One GPU: what the node agent reported (node.inventory: NVML's facts or a simulated GPU's), then who
    holds it and its id. Declared in the agent's order, so that the row reads back as it was sent."""

    index: int
    name: str = ""
    memory_gb: Number = 0
    memory_free_gb: Number | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    temperature_c: int | None = None
    simulated: bool | None = None
    allocated_to: str | None = None  # the copy holding it, as the caller may see it
    id: str | None = None  # its UUID, else its PCI bus id


class NodeView(Response):
    id: str
    state: str
    address: str
    engine: str
    gpus: list[GpuView]
    allocated: int
    cpus: int
    memory_gb: Number
    labels: dict[str, str]
    taints: list[str]
    draining: bool
    last_heartbeat: float
