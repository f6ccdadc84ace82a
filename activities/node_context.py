"""NodeContext: which node an activity runs on (its id, address, engine and state dir), the one fact every
node activity module (ranks, services, weights) shares; its own module so none of them imports another.
It also carries the agent's DownloadMeter, which the download activities feed and the agent's /metrics reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from activities.download_meter import DownloadMeter
from berth.settings import StateLayout


@dataclass(frozen=True)
class NodeContext:
    node_id: str
    address: str
    engine: str
    state: StateLayout
    downloads: DownloadMeter = field(default_factory=DownloadMeter, compare=False)

    @property
    def node_dir(self) -> Path:
        return self.state.nodes / self.node_id

    @property
    def engine_cache(self) -> Path:
        """The engine's compile and kernel cache (VLLM_CACHE_ROOT), shared by every rank of the node."""
        return self.node_dir / "vllm-cache"

    @property
    def ranks_dir(self) -> Path:
        return self.node_dir / "ranks"
