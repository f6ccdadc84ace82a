"""`berth up|down|status|ca-cert`: the embedded stack on this machine (one state dir)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from berth.errors import BerthError
from berth.ports import DEFAULT_PORT_BASE
from cli.common import Format, OutputOption, StateDirOption, console, emit_json, fail, resolve_state_dir, table

# Registered without a name: its commands are the root's (`berth up`, not `berth stack up`).
app = typer.Typer()


@app.command()
def up(
    state_dir: StateDirOption = None,
    simulate_gpus: Annotated[str | None, typer.Option(help="Each node reports simulated GPUs, e.g. 4x80GB")] = None,
    nodes: Annotated[int, typer.Option(help="Node agents to run on this machine")] = 1,
    port_base: Annotated[int, typer.Option(help="First of the stack's ports")] = DEFAULT_PORT_BASE,
    engine: Annotated[str | None, typer.Option(help="Force the nodes' engine: vllm, vllm-cpu or simulator")] = None,
    hf_mirror: Annotated[Path | None, typer.Option(help="Serve this directory as a local Hugging Face mirror")] = None,
    detach: Annotated[bool, typer.Option(help="Run in the background")] = False,
    tls: Annotated[bool, typer.Option(help="Serve the API and the endpoint proxy over https with a private CA "
                                          "(`berth ca-cert` prints it)")] = False,
    tls_cert: Annotated[Path | None, typer.Option(help="The operator's server certificate (PEM), with --tls-key "
                                                      "and --tls-ca, instead of the private CA")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The key of --tls-cert (PEM)")] = None,
    tls_ca: Annotated[Path | None, typer.Option(help="The CA that signed --tls-cert (PEM)")] = None,
    tls_name: Annotated[list[str] | None, typer.Option(help="Another host name or address for the private "
                                                           "CA's server certificate (repeatable)")] = None,
) -> None:
    """Start the embedded stack: Temporal, API, control worker, node agents and endpoint proxy."""
    # The stack driver imports the node agent and Temporal: only the commands that use it pay for that.
    from berth.tls import operator_files
    from stack import embedded as stack

    try:
        options = stack.StackOptions(state_dir=resolve_state_dir(state_dir), port_base=port_base, nodes=nodes,
                                     simulate_gpus=simulate_gpus, engine=engine,
                                     hf_mirror=hf_mirror.resolve() if hf_mirror else None, tls=tls,
                                     tls_files=operator_files(tls_cert, tls_key, tls_ca),
                                     tls_names=tuple(tls_name or ()))
        if options.tls_names and (not tls or options.tls_files):
            raise fail("--tls-name names the private CA's certificate: use it with --tls.")
        if detach:
            _print_stack(stack.start_detached(options), detached=True)
            return
        stack.run_foreground(options, lambda info: _print_stack(info, detached=False))
    except BerthError as error:
        raise fail(str(error)) from None


def _print_stack(info: dict[str, Any], detached: bool) -> None:
    from berth.settings import ClientConfig

    console.print("[bold green]Berth is up.[/]")
    console.print(f"  API          {info['api_url']}")
    console.print(f"  Console      {info['api_url']}/ui  (`berth console` prints a sign-in token)")
    console.print(f"  Endpoints    {info['proxy_url']}/endpoints/<endpoint-id>/v1")
    console.print(f"  Temporal UI  {info['temporal_ui']}")
    if info.get("hf_endpoint"):
        console.print(f"  HF mirror    {info['hf_endpoint']}")
    if info.get("ca_file"):
        console.print(f"  CA           {info['ca_file']} (clients: NODE_EXTRA_CA_CERTS / CURL_CA_BUNDLE)")
    console.print(f"  State dir    {info['state_dir']}")
    console.print(f"  Client config written to {ClientConfig.path()}")
    if detached:
        console.print(f"Stop it with `berth down --state-dir {info['state_dir']}`", highlight=False)
    else:
        console.print("Press Ctrl-C to stop.", highlight=False)
    sys.stdout.flush()


@app.command("ca-cert")
def ca_cert(state_dir: StateDirOption = None) -> None:
    """Print the CA (PEM) that signed the API's and endpoint proxy's certificate, for clients to trust."""
    from berth.settings import StateLayout

    layout = StateLayout(resolve_state_dir(state_dir))
    ca_file = None
    if layout.stack_file.exists():
        ca_file = json.loads(layout.stack_file.read_text()).get("ca_file")
    path = Path(ca_file) if ca_file else layout.keys / "tls" / "ca.pem"
    try:
        sys.stdout.write(path.read_text())
    except OSError:
        raise fail(f"No CA in {layout.root}: start the stack with `berth up --tls` (or give --state-dir).") from None


@app.command()
def down(state_dir: StateDirOption = None) -> None:
    """Stop the embedded stack started by `berth up` (every process it started)."""
    from stack import state as stack

    try:
        info = stack.down(resolve_state_dir(state_dir))
    except BerthError as error:
        raise fail(str(error)) from None
    console.print(f"Stopped the Berth stack in {info['state_dir']}.")


@app.command()
def status(state_dir: StateDirOption = None, output: OutputOption = Format.TABLE) -> None:
    """Show whether the embedded stack runs and where."""
    from stack import state as stack

    try:
        info = stack.status(resolve_state_dir(state_dir))
    except BerthError as error:
        raise fail(str(error)) from None
    if output is Format.JSON:
        emit_json(info)
        return
    console.print(f"Stack pid {info['pid']}: {'running' if info['running'] else 'NOT running'}")
    console.print(f"  API {info['api_url']}  console {info['api_url']}/ui  proxy {info['proxy_url']}  "
                  f"Temporal UI {info['temporal_ui']}")
    rows = [{**child, "last_exit_at": _exited_at(child.get("last_exit_at"))} for child in info["children"]]
    table(rows, [("name", "COMPONENT"), ("pid", "PID"), ("running", "RUNNING"), ("restarts", "RESTARTS"),
                 ("last_exit_status", "LAST EXIT"), ("last_exit_at", "EXITED AT")])
    if not info.get("restarts_enabled", True):
        console.print("  Restarts are off (restart_components=false): a crashed component stays down.",
                      highlight=False)


def _exited_at(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="seconds")
