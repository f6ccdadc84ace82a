"""NodeContext: which node an activity runs on (its id, address, engine and state dir), the one fact every
node activity module (ranks, services, weights) shares; its own module so none of them imports another."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from berth.settings import StateLayout


@dataclass(frozen=True)
class NodeContext:
    node_id: str
    address: str
    engine: str
    state: StateLayout

    @property
    def node_dir(self) -> Path:
        return self.state.nodes / self.node_id

    @property
    def ranks_dir(self) -> Path:
        return self.node_dir / "ranks"
