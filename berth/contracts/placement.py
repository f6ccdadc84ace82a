"""Placement and copy payloads: the requests and records of the internal routes that node agents, the
control worker and the endpoint proxy call (reservations, fencing, holdings, published copies, service
ports), in the one pydantic base every Temporal payload derives from (workflows/payloads.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from berth.contracts.base import INT32_MAX, Payload
from berth.sites import SITE_WORD

SiteWord = Annotated[str, Field(pattern=rf"^{SITE_WORD}$")]


class RankPlacement(Payload):
    rank: int
    node_id: str
    address: str
    gpus: tuple[int, ...] = ()
    port: int
    # What CUDA_VISIBLE_DEVICES names `gpus` by where an index will not do (a MIG slice's `MIG-<UUID>`, issue 36), one
    # per GPU in order; empty: the indices themselves.
    devices: tuple[str, ...] = ()


class Placement(Payload):
    copy_id: str
    ranks: tuple[RankPlacement, ...]
    master_port: int = 0

    @property
    def leader(self) -> RankPlacement:
        return self.ranks[0]


class SitePlacement(Payload):
    """A pool's site rules as placement applies them to each of its copies (issue 36; catalog.definition.SitePick:
    its values PreferredSite, AllowedSites, Residency, MaxCopiesPerSite, MinSites)."""

    preferred: Annotated[str, Field(pattern=rf"^{SITE_WORD}$|^$")] = ""
    allowed: tuple[SiteWord, ...] = Field(default=(), max_length=16)
    residency: Annotated[str, Field(pattern=rf"^{SITE_WORD}$|^$")] = ""
    max_copies_per_site: Annotated[int, Field(ge=0, le=1000)] = 0  # 0: no limit
    min_sites: Annotated[int, Field(ge=0, le=64)] = 0  # 0 or 1: off


class ReserveRequest(Payload):
    workflow_id: str
    copy_id: str
    nodes: int = Field(ge=1, le=INT32_MAX)
    gpus_per_node: int = Field(ge=0, le=INT32_MAX)  # negative GPUs would count as GPU-seconds given back
    gpu_memory_gb: float = 0
    prefer_volume: str | None = None
    prefer_model: str | None = None  # a model digest: nodes whose cache holds it come first
    # "slurm": Slurm places the copy (issue 35). Only the reservation is kept — what quotas, usage and the copy's
    # publish and release go by —, no node's GPUs or ports: Slurm's nodes are not Berth's to hand out.
    placed_by: Literal["berth", "slurm"] = "berth"
    sites: SitePlacement | None = None  # where the pool's copies may go (None: anywhere, spread across domains)


class ReserveResult(Payload):
    placement: Placement | None = None
    blocked_reason: str | None = None


class FenceRequest(Payload):
    """Keep a released copy's GPUs and ports on `nodes` (where a rank was lost with its agent) reserved
    until those nodes confirm the rank's process is gone."""

    copy_id: str
    nodes: tuple[str, ...]


MAX_HOLDINGS = 256  # live rank processes one node may report; far above any node's GPU count


class NodeHolding(Payload):
    """What one live rank process on a node holds, as its node agent reports it in each heartbeat."""

    owner: str = Field(max_length=160)  # the copy id
    # Bounded as a node's GPU indices (GpuReport) and ports are: an index past a store column's range answered 500.
    gpus: tuple[Annotated[int, Field(ge=0, le=1023)], ...] = Field(default=(), max_length=64)
    ports: tuple[Annotated[int, Field(ge=0, le=65535)], ...] = Field(default=(), max_length=4)


class CopyReadiness(Payload):
    """A published copy taken out of routing (its engine stopped answering) or back in (it answers again)."""

    ready: bool


class CopyRecord(Payload):
    """What the store keeps about one serving copy (the endpoint proxy routes on these)."""

    workflow_id: str
    endpoint_id: str
    copy_id: str
    url: str
    ready: bool = True
    revision: int = Field(1, ge=-INT32_MAX - 1, le=INT32_MAX)  # the workflow revision the copy serves


class FrontPortRequest(Payload):
    """One port on some node for a workflow's service (not a rank)."""

    workflow_id: str
    owner: str = Field(description="Who holds the port, e.g. '<workflow>.litellm'; released by this name")


class FrontPort(Payload):
    node_id: str
    address: str
    port: int


class EndpointFront(Payload):
    endpoint_id: str
    service: str
    url: str | None = None
