"""`berth node`: run a node agent on this machine (no subcommand), or list, drain and undrain nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from berth.sites import FAILURE_DOMAIN_LABEL, SITE_LABEL
from cli import node_mig
from cli.common import Format, OutputOption, Rows, call, console, listing, table, wire
from cli.components import run_node_agent

if TYPE_CHECKING:
    from berth.contracts.nodes import GpuView, NodeView

app = typer.Typer(help="Run a node agent (no subcommand) or list nodes.", invoke_without_command=True)
app.add_typer(node_mig.app, name="mig")  # MIG slices of its H100s (issue 36)


@app.callback()
def node(
    ctx: typer.Context,
    node_id: Annotated[str | None, typer.Option("--id", help="Node id (default: host name)")] = None,
    engine: Annotated[str | None, typer.Option(help="Force vllm, vllm-cpu or simulator")] = None,
    simulate_gpus: Annotated[str | None, typer.Option(help="Report simulated GPUs, e.g. 4x80GB")] = None,
    address: Annotated[str, typer.Option(help="Address other nodes reach this one at")] = "127.0.0.1",
    port_start: Annotated[int, typer.Option(help="First of 100 ports for ranks and services")] = 20000,
    taint: Annotated[list[str] | None, typer.Option(help="Taint this node (no placement)")] = None,
    # Unset or 0: not served. `berth up` gives node N the stack's port base + 19 + N (docs/operations.md).
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on 127.0.0.1 at this port")] = None,
    # The node's site and failure domain (issue 36): what a pool's site values and spread read (berth/sites.py).
    site: Annotated[str | None, typer.Option(help="Site it is in (AllowedSites, Residency, PreferredSite)")] = None,
    failure_domain: Annotated[str | None, typer.Option(
        help="What fails with it (rack, room): copies spread across them")] = None,
) -> None:
    """Run a node agent on this machine."""
    if ctx.invoked_subcommand is not None:
        return
    run_node_agent(node_id, engine, simulate_gpus, address, port_start, tuple(taint or ()), metrics_port,
                   site=site, failure_domain=failure_domain)


@app.command("list")
def node_list(output: OutputOption = Format.TABLE) -> None:
    """List nodes (ready, offline or draining), their GPUs, free memory and what is allocated."""
    nodes = listing(output, lambda api: api.nodes(),
                    [("id", "NODE"), ("state", "STATE"), ("engine", "ENGINE"), ("site", "SITE"),
                     ("failure_domain", "FAILURE DOMAIN"), ("gpus", "GPUS"), ("free", "FREE GPUS"),
                     ("allocated", "ALLOCATED"), ("labels", "LABELS"), ("taints", "TAINTS")],
                    rows=_node_rows)
    if nodes is None:
        return  # printed as JSON
    gpus = [{"node": n.id, **wire(g), "allocated_to": g.allocated_to or "",
             "memory": f"{g.memory_free_gb or 0:g}/{g.memory_gb:g} GB", **_health(g)}
            for n in nodes for g in n.gpus]
    if gpus:
        table(gpus, [("node", "NODE"), ("index", "GPU"), ("name", "NAME"), ("memory", "FREE/TOTAL"),
                     ("id", "UUID / PCI BUS ID"), ("allocated_to", "ALLOCATED TO"), ("temperature", "TEMP"),
                     ("power", "POWER"), ("ecc", "ECC ERRORS"), ("health", "PLACEMENT")], title="GPUs")
    slurm = call(lambda api: api.slurm_nodes())
    if slurm.backend == "slurm":  # copies are Slurm jobs: its nodes, read-only (issue 35)
        table([{**wire(n), "partitions": ",".join(n.partitions), "memory": f"{n.memory_mb / 1024:.0f} GB"}
               for n in slurm.nodes],
              [("name", "NODE"), ("state", "STATE"), ("address", "ADDRESS"), ("partitions", "PARTITIONS"),
               ("gres", "GRES"), ("gpus", "GPUS"), ("cpus", "CPUS"), ("memory", "MEMORY")],
              title="Slurm nodes (copies run as Slurm jobs; Slurm places them)")


def _node_rows(nodes: list[NodeView]) -> Rows:
    return [{**wire(n), "gpus": _gpu_summary(n.gpus), "site": n.site or "-", "failure_domain": n.failure_domain or "-",
             "free": f"{sum(1 for g in n.gpus if not g.allocated_to)}/{len(n.gpus)}",
             "labels": ",".join(f"{k}={v}" for k, v in n.labels.items() if k not in (SITE_LABEL, FAILURE_DOMAIN_LABEL)),
             "taints": ",".join(n.taints)}
            for n in nodes]


def _health(gpu: GpuView) -> dict[str, str]:
    """A GPU's last known readings ("-": never known) and whether placement skips it, and why."""
    return {"temperature": "-" if gpu.temperature_c is None else f"{gpu.temperature_c} °C",
            "power": "-" if gpu.power_w is None else f"{gpu.power_w:g} W",
            "ecc": "-" if gpu.ecc_uncorrected is None else str(gpu.ecc_uncorrected),
            "health": f"skipped: {gpu.unhealthy}" if gpu.unhealthy else "ok"}


def _gpu_summary(gpus: list[GpuView]) -> str:
    names = ", ".join(sorted({g.name for g in gpus}))
    return f"{len(gpus)} ({names})" if gpus else "CPU only"


@app.command("drain")
def node_drain(node_id: str,
               grace_seconds: Annotated[float | None, typer.Option(
                   "--grace-seconds", help="Also move its copies elsewhere, draining each this long")] = None,
               ) -> None:
    """Stop placing new copies on a node (its copies keep serving)."""
    if grace_seconds is None:
        result = call(lambda api: api.set_node_draining(node_id, True))
        console.print(f"Node {result.id} is {result.state}: it takes no new copies.")
        return
    grace = grace_seconds
    result = call(lambda api: api.drain_node_with_grace(node_id, grace))
    console.print(f"Node {result.id} is {result.state}: it takes no new copies; its pools move their copies "
                  f"elsewhere, each draining up to {grace:g} s.")


@app.command("undrain")
def node_undrain(node_id: str) -> None:
    """Let a drained node take new copies again."""
    result = call(lambda api: api.set_node_draining(node_id, False))
    console.print(f"Node {result.id} is {result.state}.")
