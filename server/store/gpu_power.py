"""The power a copy's GPUs draw, as their nodes' heartbeats last read it through NVML (server/gpu_health.py keeps
the last known reading): energy_optimized routing weighs it where a copy's own /metrics report no draw."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.gpu_health import reading
from server.store.tables import AllocationRow, NodeRow


def copies_power_w(s: Session, copy_ids: Collection[str]) -> dict[str, float]:
    """Watts per copy, summed over the GPUs it holds, for the copies of `copy_ids` whose every GPU has a known
    reading (a copy half-known would look cheaper than it is: left out, it ranks as unknown). Reads only the nodes
    those copies hold GPUs on: the routes table asks for the copies of energy_optimized pools alone."""
    if not copy_ids:
        return {}
    held = s.execute(select(AllocationRow.copy_id, AllocationRow.node_id, AllocationRow.gpu_index)
                     .where(AllocationRow.copy_id.in_(copy_ids))).all()
    node_ids = {node_id for _copy, node_id, _gpu in held}
    watts_by_gpu = {(node_id, gpu.get("index")): reading(gpu, "power_w")
                    for node_id, gpus in s.execute(select(NodeRow.id, NodeRow.gpus).where(NodeRow.id.in_(node_ids)))
                    for gpu in gpus or ()}
    totals: dict[str, float] = {}
    unknown: set[str] = set()
    for copy_id, node_id, gpu_index in held:
        watts = watts_by_gpu.get((node_id, gpu_index))
        if watts is None:
            unknown.add(copy_id)
        else:
            totals[copy_id] = totals.get(copy_id, 0.0) + watts
    return {copy_id: round(watts, 1) for copy_id, watts in totals.items() if copy_id not in unknown}
