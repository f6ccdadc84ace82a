"""Slurm route (issue 35): on a cluster whose placement backend is Slurm, its nodes and GRES as `scontrol show node`
reports them, read-only (Berth places nothing on them itself: Slurm does). Any signed-in caller, as `node list`."""

from __future__ import annotations

from fastapi import APIRouter

from berth.contracts.slurm import SlurmNodes, SlurmNodeView
from berth.slurm.commands import SlurmCommands
from server.context import Context
from server.guards import Caller
from server.refusals import refusals

router = APIRouter()


@router.get("/v1/slurm/nodes", responses=refusals(503))
async def slurm_nodes(context: Context, who: Caller) -> SlurmNodes:
    """Slurm's nodes; an empty list where Berth's node agents place copies. 503: Slurm's commands did not answer."""
    del who
    if context.settings.placement_backend != "slurm":
        return SlurmNodes(backend="berth", nodes=[])
    nodes = await SlurmCommands(context.slurm).nodes()
    return SlurmNodes(backend="slurm", nodes=[
        SlurmNodeView(name=n.name, state=n.state, address=n.address, hostname=n.hostname,
                      partitions=list(n.partitions), gres=n.gres, gpus=n.gpus, cpus=n.cpus, memory_mb=n.memory_mb)
        for n in nodes])
