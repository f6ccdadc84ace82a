"""Node contracts: a node agent's heartbeat (its inventory), a node's state after a heartbeat or a drain, and the
node list with its GPUs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator

from berth.contracts.base import INT32_MAX, INT64_MAX, NonNegativeNumber, Number, OpenResponse, Payload, Response
from berth.contracts.placement import MAX_HOLDINGS, NodeHolding
from berth.sites import label_problem

# A GPU's memory as the capacity figures sum it: bounded, so that no report makes a cluster's total overflow to
# infinity (which JSON carries as null; schemathesis found it once the heartbeat's GPUs gained fields). 100 TB is
# far past any GPU.
MAX_GPU_MEMORY_GB = 100_000
GpuMemoryGb = Annotated[int, Field(ge=0, le=MAX_GPU_MEMORY_GB)] | Annotated[float, Field(ge=0, le=MAX_GPU_MEMORY_GB)]


class GpuReport(Payload):
    """One GPU as a node agent reports it (node/inventory.py: NVML's facts or a simulated GPU's): the fields the
    API reads are typed and bounded, the rest kept as they came. Declared in the agent's order, as GpuView."""

    model_config = ConfigDict(frozen=True, extra="allow")

    index: int = Field(ge=0, le=1023)
    name: str = Field("", max_length=256)
    memory_gb: GpuMemoryGb = 0
    memory_free_gb: GpuMemoryGb | None = None
    uuid: str | None = Field(None, max_length=256)  # a simulated GPU's holds its node's id (128 at most)
    pci_bus_id: str | None = Field(None, max_length=64)
    # Health, as NVML read it (node/gpu_health.py); None or 0 °C / 0 W: unknown, and the server keeps the last known
    # value (server/gpu_health.py). ECC: uncorrected volatile errors, sent only where ECC mode is enabled.
    temperature_c: Annotated[int | None, Field(ge=0, le=255)] = None
    power_w: Annotated[float | None, Field(ge=0, le=10_000)] = None
    ecc_uncorrected: Annotated[int | None, Field(ge=0, le=INT64_MAX)] = None
    simulated: bool | None = None


class NodeInventory(Payload):
    """A node agent's heartbeat (`POST /v1/nodes/{node_id}/heartbeat`): what the node has, and what its live rank
    processes hold (`held`, checked by server/store/fencing.py; None from an agent too old to say). A heartbeat that is
    not one is refused in one line (422), never stored."""

    address: str = Field(min_length=1, max_length=255)
    engine: str = Field(min_length=1, max_length=64)
    gpus: list[GpuReport] = Field(default=[], max_length=256)
    gpu_source: str | None = Field(None, max_length=1024)  # "nvml", or why NVML is unavailable
    cpus: int = Field(0, ge=0, le=INT32_MAX)  # an Integer column: past it the store cannot keep it (was a 400)
    memory_gb: NonNegativeNumber = 0
    labels: dict[str, str] = {}
    taints: list[str] = []
    volumes: list[str] = []
    port_start: int = Field(0, ge=0, le=65535)
    models: list[Any] | None = None  # cache digests: the store keeps the well-formed ones (server/store/database.py)
    # Checked item by item by server/store/fencing.py (400 in one line); the schema states the same shape.
    held: list[Any] | None = Field(None, json_schema_extra={"items": NodeHolding.model_json_schema(),
                                                            "maxItems": MAX_HOLDINGS})
    @field_validator("labels")
    @classmethod
    def _site_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        """Its site and failure domain (berth/sites.py's labels) are words placement and routing compare."""
        problem = label_problem(labels)
        if problem is not None:
            raise ValueError(problem)
        return labels

    # The agent is shutting down (its last heartbeat): the node is offline at once, so no copy is placed on it
    # while it stops its ranks (`berth down` waited 15 s for a copy re-placed onto it), until its next heartbeat.
    leaving: bool = False


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
    temperature_c: int | None = None  # the last known readings (a heartbeat saying "unknown" keeps them)
    power_w: Number | None = None
    ecc_uncorrected: int | None = None
    simulated: bool | None = None
    allocated_to: str | None = None  # the copy holding it, as the caller may see it
    # Why placement skips it now (too hot, uncorrected ECC errors: the cluster's max_gpu_temp_c, reject_ecc);
    # None: it is healthy as far as is known.
    unhealthy: str | None = None
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
    site: str | None = None  # its labels' berth.site (berth/sites.py); None: its agent reports none
    failure_domain: str | None = None  # its labels' berth.failure-domain
    taints: list[str]
    draining: bool
    last_heartbeat: float
