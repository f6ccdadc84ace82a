"""The `berth` command line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from berth.api_client import ApiClient
from berth.errors import BerthError, UserInputError
from berth.settings import DEFAULT_PORT_BASE, ClientConfig, default_state_dir
from catalog.values import load_values_file, parse_values
from cli.output import Format, console, emit_json, errors, table
from cli.tokens import token_app

T = TypeVar("T")

app = typer.Typer(help="Berth: serve LLMs on GPU clusters from a catalog.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
workflow_app = typer.Typer(help="Workflows: start, inspect and stop served models.", no_args_is_help=True)
catalog_app = typer.Typer(help="The workflow catalog.", no_args_is_help=True)
endpoints_app = typer.Typer(help="Workflow endpoints.", no_args_is_help=True)
endpoint_app = typer.Typer(help="Endpoints and their access tokens.", no_args_is_help=True)
secret_app = typer.Typer(help="Secrets: typed values referenced as secret://user|group|organization/NAME.",
                         no_args_is_help=True)
node_app = typer.Typer(help="Run a node agent (no subcommand) or list nodes.", invoke_without_command=True)
user_app = typer.Typer(help="Users (administrators create them).", no_args_is_help=True)
group_app = typer.Typer(help="Groups (administrators create them and add members).", no_args_is_help=True)
app.add_typer(workflow_app, name="workflow")
workflow_app.add_typer(catalog_app, name="catalog")
workflow_app.add_typer(endpoints_app, name="endpoints")
app.add_typer(catalog_app, name="catalog", help="Alias of `berth workflow catalog`.")
app.add_typer(endpoint_app, name="endpoint")
app.add_typer(node_app, name="node")
app.add_typer(secret_app, name="secret")
app.add_typer(user_app, name="user")
app.add_typer(group_app, name="group")
app.add_typer(token_app, name="token")

OutputOption = Annotated[Format, typer.Option("--output", "-o", help="table or json")]
StateDirOption = Annotated[Path | None,
                           typer.Option("--state-dir", help="State directory (default ~/.local/state/berth)")]


def fail(message: str, code: int = 1) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def call(work: Callable[[ApiClient], Awaitable[T]]) -> T:
    """Run one API interaction; turn Berth errors into one clear line and a non-zero exit."""
    config = ClientConfig.load()

    async def runner() -> T:
        async with ApiClient(config.api_url, config.token, ca_file=config.ca_file) as api:
            return await work(api)

    try:
        return asyncio.run(runner())
    except BerthError as error:
        raise fail(str(error)) from None


def answer(output: Format, work: Callable[[ApiClient], Awaitable[T]]) -> T | None:
    """One API interaction for a command with `-o`: with `-o json` print its answer and return None (the
    command is done), else return the answer for the command to render."""
    result = call(work)
    if output is Format.JSON:
        emit_json(result)
        return None
    return result


Rows = list[dict[str, Any]]


def listing(output: Format, fetch: Callable[[ApiClient], Awaitable[Rows]], columns: Sequence[tuple[str, str]],
            rows: Callable[[Rows], Rows] | None = None) -> Rows | None:
    """The body of a listing command: fetch the items, then print them as JSON with `-o json`, else as a
    table of `rows(items)` (the items as they are by default). Returns the items when it printed a table,
    so that a command may add another below it."""
    items = answer(output, fetch)
    if items is not None:
        table(rows(items) if rows else items, columns)
    return items


def _state_dir(value: Path | None) -> Path:
    return (value or default_state_dir()).resolve()


# --- the embedded stack ------------------------------------------------------------------------------
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
    from berth.tls import operator_files
    from stack import embedded as stack

    try:
        options = stack.StackOptions(state_dir=_state_dir(state_dir), port_base=port_base, nodes=nodes,
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
    console.print("[bold green]Berth is up.[/]")
    console.print(f"  API          {info['api_url']}")
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

    layout = StateLayout(_state_dir(state_dir))
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
        info = stack.down(_state_dir(state_dir))
    except BerthError as error:
        raise fail(str(error)) from None
    console.print(f"Stopped the Berth stack in {info['state_dir']}.")


@app.command()
def status(state_dir: StateDirOption = None, output: OutputOption = Format.TABLE) -> None:
    """Show whether the embedded stack runs and where."""
    from stack import state as stack

    try:
        info = stack.status(_state_dir(state_dir))
    except BerthError as error:
        raise fail(str(error)) from None
    if output is Format.JSON:
        emit_json(info)
        return
    console.print(f"Stack pid {info['pid']}: {'running' if info['running'] else 'NOT running'}")
    console.print(f"  API {info['api_url']}  proxy {info['proxy_url']}  Temporal UI {info['temporal_ui']}")
    rows = [{**child, "last_exit_at": _exited_at(child.get("last_exit_at"))} for child in info["children"]]
    table(rows, [("name", "COMPONENT"), ("pid", "PID"), ("running", "RUNNING"), ("restarts", "RESTARTS"),
                 ("last_exit_status", "LAST EXIT"), ("last_exit_at", "EXITED AT")])
    if not info.get("restarts_enabled", True):
        console.print("  Restarts are off (restart_components=false): a crashed component stays down.",
                      highlight=False)


def _exited_at(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="seconds")


# --- component processes (what `berth up` runs; also for multi-host) ---------------------------------
def _env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise fail(f"{name} is not set. `berth up` sets it; for a multi-host setup see docs/operations.md.")
    return value


@app.command()
def server(port: Annotated[int, typer.Option()] = DEFAULT_PORT_BASE + 2,
           host: Annotated[str, typer.Option()] = "127.0.0.1") -> None:
    """Run the control-plane REST API."""
    import uvicorn

    from berth.settings import ServerTLS
    from server.app import build_context, create_app

    try:
        tls = ServerTLS.from_env()
    except BerthError as error:
        raise fail(str(error)) from None
    context = build_context(Path(_env("BERTH_STATE_DIR")), _env("BERTH_TEMPORAL_ADDRESS", "127.0.0.1:7233"),
                            os.environ.get("BERTH_DATABASE_URL"))
    uvicorn.run(create_app(context), host=host, port=port, log_level="warning",
                **(tls.uvicorn_options() if tls else {}))


@app.command()
def worker() -> None:
    """Run the control worker (workflows and control-side activities)."""
    from server.worker import main as worker_main

    worker_main(Path(_env("BERTH_STATE_DIR")), _env("BERTH_TEMPORAL_ADDRESS", "127.0.0.1:7233"),
                _env("BERTH_API_URL"), _env("BERTH_TOKEN"))


@app.command()
def proxy(port: Annotated[int, typer.Option()] = DEFAULT_PORT_BASE + 3,
          host: Annotated[str, typer.Option()] = "127.0.0.1",
          fd: Annotated[int | None, typer.Option(help="Serve on this inherited listening socket "
                                                     "(its owner keeps it open across restarts)")] = None) -> None:
    """Run the endpoint proxy (the public entry to every endpoint)."""
    from gateway.run import run_endpoint_proxy

    run_endpoint_proxy(_env("BERTH_API_URL"), _env("BERTH_TOKEN"), host, port, fd=fd)


@app.command()
def gateway(port: Annotated[int, typer.Option()] = DEFAULT_PORT_BASE + 7,
            host: Annotated[str, typer.Option()] = "127.0.0.1",
            routing_policy: Annotated[str | None, typer.Option(help="Policy for every model's copies "
                                                                     "(default: each pool's own)")] = None,
            discovery_interval: Annotated[float, typer.Option(min=0.1, max=600,
                                                              help="Seconds between discovery polls")] = 2.0,
            endpoint_id: Annotated[str | None, typer.Option(help="The gateway's own endpoint (callers' "
                                                                 "assertions name it)")] = None) -> None:
    """Run the discovering model gateway with BERTH_TOKEN's identity (what the catalog entry runs). It calls
    copies with their keys, read with BERTH_REPLICA_KEYS_TOKEN (the catalog entry's node mints it), else
    with BERTH_TOKEN if that is an administrator's. With BERTH_GATEWAY_MASTER_KEY set (the entry's
    MasterKeySecret) it answers as LiteLLM does: a key sent must be that one; without a key, the
    endpoint proxy's caller assertion for --endpoint-id must vouch for the caller."""
    from gateway.model_gateway import run_gateway

    master_key = os.environ.get("BERTH_GATEWAY_MASTER_KEY") or None
    if master_key and not endpoint_id:
        raise fail("BERTH_GATEWAY_MASTER_KEY needs --endpoint-id (the gateway's endpoint, which its callers' "
                   "assertions name).")
    run_gateway(_env("BERTH_API_URL"), _env("BERTH_TOKEN"), host, port, os.environ.get("BERTH_REPLICA_KEYS_TOKEN"),
                routing_policy=routing_policy, refresh_s=discovery_interval, master_key=master_key,
                endpoint_id=endpoint_id)


@app.command("admin-token")
def admin_token(state_dir: StateDirOption = None,
                user: Annotated[str, typer.Option(help="Administrator user name")] = "admin") -> None:
    """Mint an administrator API token from the state dir's signing key (multi-host set-up)."""
    from berth.security import Identity, SigningKey
    from berth.settings import StateLayout

    key = SigningKey.load_or_create(StateLayout(_state_dir(state_dir)).keys)
    identity = Identity(user=user, groups=("default",), org="default", admin=True)
    # Listed by `berth token list` from its first use, revocable like any other.
    sys.stdout.write(key.api_token(identity, kind="key-holder", note="berth admin-token") + "\n")


@app.command("hf-mirror")
def hf_mirror_command(directory: Annotated[Path, typer.Option("--dir")],
                      port: Annotated[int, typer.Option()] = DEFAULT_PORT_BASE + 4) -> None:
    """Serve a directory of model repositories as an offline Hugging Face mirror."""
    from berth.hf_mirror import serve_forever

    serve_forever(directory, port, Path(_env("BERTH_STATE_DIR")))


@node_app.callback()
def node(
    ctx: typer.Context,
    node_id: Annotated[str | None, typer.Option("--id", help="Node id (default: host name)")] = None,
    engine: Annotated[str | None, typer.Option(help="Force vllm, vllm-cpu or simulator")] = None,
    simulate_gpus: Annotated[str | None, typer.Option(help="Report simulated GPUs, e.g. 4x80GB")] = None,
    address: Annotated[str, typer.Option(help="Address other nodes reach this one at")] = "127.0.0.1",
    port_start: Annotated[int, typer.Option(help="First of 100 ports for ranks and services")] = 20000,
    taint: Annotated[list[str] | None, typer.Option(help="Taint this node (no placement)")] = None,
) -> None:
    """Run a node agent on this machine."""
    if ctx.invoked_subcommand is not None:
        return
    import logging
    import socket

    from activities.ranks import ENGINES
    from node.agent import AgentConfig, run_agent

    if engine is not None and engine not in ENGINES:
        raise fail(f"--engine must be one of {', '.join(ENGINES)}, not '{engine}'.")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll and scrape drowns the log
    run_agent(AgentConfig(
        node_id=node_id or socket.gethostname(), state_dir=Path(_env("BERTH_STATE_DIR")),
        api_url=_env("BERTH_API_URL"), token=_env("BERTH_TOKEN"),
        temporal_address=_env("BERTH_TEMPORAL_ADDRESS", "127.0.0.1:7233"), address=address, engine=engine,
        simulate_gpus=simulate_gpus, port_start=port_start, taints=tuple(taint or ()),
    ))


@node_app.command("list")
def node_list(output: OutputOption = Format.TABLE) -> None:
    """List nodes (ready, offline or draining), their GPUs, free memory and what is allocated."""
    nodes = listing(output, lambda api: api.nodes(),
                    [("id", "NODE"), ("state", "STATE"), ("engine", "ENGINE"), ("gpus", "GPUS"),
                     ("free", "FREE GPUS"), ("allocated", "ALLOCATED"), ("labels", "LABELS"), ("taints", "TAINTS")],
                    rows=_node_rows)
    if nodes is None:
        return  # printed as JSON
    gpus = [{"node": n["id"], **g, "allocated_to": g["allocated_to"] or "",
             "memory": f"{g.get('memory_free_gb', 0):g}/{g.get('memory_gb', 0):g} GB"}
            for n in nodes for g in n["gpus"]]
    if gpus:
        table(gpus, [("node", "NODE"), ("index", "GPU"), ("name", "NAME"), ("memory", "FREE/TOTAL"),
                     ("id", "UUID / PCI BUS ID"), ("allocated_to", "ALLOCATED TO")], title="GPUs")


def _node_rows(nodes: Rows) -> Rows:
    return [{**n, "gpus": _gpu_summary(n["gpus"]),
             "free": f"{sum(1 for g in n['gpus'] if not g['allocated_to'])}/{len(n['gpus'])}",
             "labels": ",".join(f"{k}={v}" for k, v in n["labels"].items()), "taints": ",".join(n["taints"])}
            for n in nodes]


def _gpu_summary(gpus: list[dict[str, Any]]) -> str:
    names = ", ".join(sorted({g["name"] for g in gpus}))
    return f"{len(gpus)} ({names})" if gpus else "CPU only"


@node_app.command("drain")
def node_drain(node_id: str) -> None:
    """Stop placing new copies on a node (its copies keep serving)."""
    result = call(lambda api: api.set_node_draining(node_id, True))
    console.print(f"Node {result['id']} is {result['state']}: it takes no new copies.")


@node_app.command("undrain")
def node_undrain(node_id: str) -> None:
    """Let a drained node take new copies again."""
    result = call(lambda api: api.set_node_draining(node_id, False))
    console.print(f"Node {result['id']} is {result['state']}.")


# --- catalog -----------------------------------------------------------------------------------------
@catalog_app.command("list")
def catalog_list(category: Annotated[str | None, typer.Option(help="e.g. ML_AND_AI")] = None,
                 tag: Annotated[str | None, typer.Option(help="e.g. LLM")] = None,
                 output: OutputOption = Format.TABLE) -> None:
    """List catalog entries."""
    listing(output, lambda api: api.catalog(category, tag),
            [("name", "NAME"), ("category", "CATEGORY"), ("tags", "TAGS"), ("description", "DESCRIPTION")])


@catalog_app.command("describe")
def catalog_describe(name: str, output: OutputOption = Format.TABLE) -> None:
    """Show an entry's parameters and the GPU memory it needs per context size."""
    entry = answer(output, lambda api: api.catalog_entry(name))
    if entry is None:
        return  # printed as JSON
    console.print(f"[bold]{entry['name']}[/] — {entry['description']}")
    parameters = [{**p, "range": _parameter_range(p), "default": _parameter_default(p, entry)}
                  for p in entry["parameters"]]
    table(parameters, [("name", "PARAMETER"), ("type", "TYPE"), ("default", "DEFAULT"), ("range", "RANGE"),
                       ("help", "HELP")])
    if entry.get("memory"):
        rows = [{**m, "context": f"{m['context']:,}{' (default)' if m['default'] else ''}"}
                for m in entry["memory"]]
        table(rows, [("context", "CONTEXT"), ("weights_gb", "WEIGHTS GB"), ("kv_cache_gb", "KV CACHE GB"),
                     ("overhead_gb", "OVERHEAD GB"), ("total_gb", "TOTAL GB"), ("gpus_80gb", "80 GB GPUS")],
              title="GPU memory needed (within 90% of each GPU)")
        default = next(m for m in entry["memory"] if m["default"])
        gpus = entry.get("default_gpus_per_node", default["gpus_80gb"])
        where = f"GpusPerNode={gpus}" if gpus else "GpusPerNode=0: the CPU engine"
        console.print(f"At its default context it needs {default['total_gb']} GB: {where} by default; lower "
                      "MaxContextSize to need less.", highlight=False)


def _parameter_default(parameter: dict[str, Any], entry: dict[str, Any]) -> Any:
    if parameter["required"]:
        return "(required)"
    memory_default = entry.get("default_gpus_per_node")
    if parameter["name"] == "GpusPerNode" and parameter["default"] is None and memory_default is not None:
        # What the memory model picks at the default context.
        return f"auto ({memory_default})"
    return parameter["default"]


def _parameter_range(parameter: dict[str, Any]) -> str:
    """Bounds or choices as one short cell: `256..131072`, `≥ 0`, `user|group`."""
    if parameter.get("choices"):
        return "|".join(parameter["choices"])
    low, high = parameter.get("min"), parameter.get("max")

    def number(value: float) -> str:
        return str(int(value)) if float(value).is_integer() else f"{value:g}"

    if low is not None and high is not None:
        return f"{number(low)}..{number(high)}"
    if low is not None:
        return f"≥ {number(low)}"
    if high is not None:
        return f"≤ {number(high)}"
    return ""


@catalog_app.command("start")
def catalog_start(
    name: str,
    values: Annotated[str | None, typer.Option("--values", help="K=V,K2=V2 (quote values with commas)")] = None,
    values_file: Annotated[Path | None, typer.Option("--values-file", help="YAML mapping of values")] = None,
    watch: Annotated[bool, typer.Option(help="Follow the workflow until it is ready")] = False,
    output: OutputOption = Format.TABLE,
) -> None:
    """Start a catalog entry; prints the workflow ID."""
    try:
        merged: dict[str, Any] = load_values_file(values_file) if values_file else {}
        for key, value in parse_values(values or "").items():
            merged[key] = value
    except UserInputError as error:
        raise fail(str(error)) from None
    started = call(lambda api: api.start_workflow(name, merged))
    if output is Format.JSON and not watch:
        emit_json(started)
        return
    console.print(started["id"], highlight=False)
    if watch:
        _watch(started["id"])


def _watch(workflow_id: str, timeout_s: float = 3600) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    seen_events = 0
    phase = None
    progress: Progress | None = None
    task = None
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            info = call(lambda api: api.describe_workflow(workflow_id))
            events = info.get("events", [])
            for event in events[seen_events:]:
                console.print(f"  [dim]{_clock(event['at'])}[/] {event['kind']}: {event['message']}", highlight=False)
            seen_events = len(events)
            download = info.get("download")
            if download and download.get("bytes_total"):
                if progress is None:
                    progress = Progress("  downloading", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                        TimeRemainingColumn(), console=console, transient=True)
                    progress.start()
                    task = progress.add_task("weights", total=download["bytes_total"])
                assert task is not None
                progress.update(task, completed=download["bytes_done"], total=download["bytes_total"])
            elif progress is not None and info.get("phase") != "downloading":
                progress.stop()
                progress = None
            if info.get("phase") != phase:
                phase = info.get("phase")
                console.print(f"[bold]{phase}[/]")
            if phase == "ready":
                console.print(f"[bold green]Ready.[/] Endpoint: {_client_url(info['endpoint'])} "
                              f"(ID {info['endpoint']['id']})", highlight=False)
                return
            if phase in ("failed", "stopped") or info.get("status") in ("failed", "terminated", "completed"):
                raise fail(f"workflow {workflow_id} {phase}: {info.get('last_error') or 'see berth workflow describe'}")
            time.sleep(0.5)
        raise fail(f"workflow {workflow_id} was not ready within {timeout_s:.0f} s; it keeps going — "
                   f"follow it with `berth workflow describe {workflow_id}`.")
    finally:
        if progress is not None:
            progress.stop()


def _client_url(endpoint: dict[str, Any]) -> str:
    """The URL a client uses: the OpenAI base URL (…/v1), or the plain URL of an endpoint that is not an
    OpenAI API (OpenCode's server)."""
    return endpoint["url"] + ("/v1" if endpoint.get("openai_compatible", True) else "")


def _clock(value: str) -> str:
    try:
        return datetime.fromisoformat(value).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return value


# --- workflows ---------------------------------------------------------------------------------------
@workflow_app.command("watch")
def workflow_watch(workflow_id: str) -> None:
    """Follow a workflow (events, download progress, phases) until it is ready or ends."""
    _watch(workflow_id)

@workflow_app.command("list")
def workflow_list(output: OutputOption = Format.TABLE) -> None:
    """List workflows."""
    listing(output, lambda api: api.workflows(),
            [("id", "WORKFLOW ID"), ("entry", "ENTRY"), ("phase", "PHASE"), ("owner", "OWNER"),
             ("created", "CREATED"), ("endpoint_id", "ENDPOINT")],
            rows=lambda rows: [{**r, "created": datetime.fromtimestamp(r["created_at"]).strftime("%Y-%m-%d %H:%M")}
                               for r in rows])


@workflow_app.command("describe")
def workflow_describe(workflow_id: str, output: OutputOption = Format.TABLE) -> None:
    """Phase, replicas, endpoint, events and last error of a workflow."""
    info = answer(output, lambda api: api.describe_workflow(workflow_id))
    if info is None:
        return  # printed as JSON
    ready = info.get("phase") == "ready"
    console.print(f"[bold]{info['id']}[/] ({info['entry']}) — phase [bold]{info.get('phase')}[/], "
                  f"Temporal status {info.get('status')}", highlight=False)
    console.print(f"  {'Ready: service running and health check passed.' if ready else 'Not ready yet.'}")
    console.print(f"  Endpoint {info['endpoint']['id']}: {_client_url(info['endpoint'])}", highlight=False)
    if info["endpoint"].get("note"):
        console.print(f"  [yellow]{info['endpoint']['note']}[/]", highlight=False)
    download = info.get("download")
    if download and download.get("bytes_total"):
        done, total = download["bytes_done"], download["bytes_total"]
        eta = f", ETA {download['eta_s']:.0f} s" if download.get("eta_s") else ""
        console.print(f"  Downloading: {done / 1e6:.0f}/{total / 1e6:.0f} MB ({100 * done / total:.0f}%), "
                      f"{download.get('rate_bps', 0) / 1e6:.1f} MB/s{eta}")
    if info.get("weights"):
        w = info["weights"]
        console.print(f"  Weights: {w['model_dir']}" + (" (cache hit)" if w.get("cache_hit") else "")
                      + (" (dry run)" if w.get("dry_run") else ""), highlight=False)
    if info.get("replicas"):
        table(info["replicas"], [("copy_id", "COPY"), ("status", "STATUS"), ("nodes", "NODES"), ("url", "URL"),
                                 ("detail", "DETAIL")], title=f"Replicas (desired {info.get('desired_replicas')})")
    if info.get("events"):
        table([{**e, "at": _clock(e["at"])} for e in info["events"][-15:]],
              [("at", "TIME"), ("kind", "EVENT"), ("message", "MESSAGE")], title="Events")
    if info.get("last_error"):
        console.print(f"[bold red]Last error:[/] {info['last_error']}", highlight=False)
    if info.get("note"):
        console.print(f"[yellow]{info['note']}[/]")


@workflow_app.command("get")
def workflow_get(workflow_id: str) -> None:
    """Print the rendered workflow definition (owner only: it holds the API key)."""
    import yaml

    data = call(lambda api: api.workflow_definition(workflow_id))
    sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


@workflow_app.command("scale")
def workflow_scale(workflow_id: str,
                   replicas: Annotated[int, typer.Option("--replicas", help="Copies the pool should run")],
                   output: OutputOption = Format.TABLE) -> None:
    """Set a replica pool's size (between MinReplicas and MaxReplicas); scale-in drains copies first."""
    result = answer(output, lambda api: api.scale_workflow(workflow_id, replicas))
    if result is None:
        return  # printed as JSON
    console.print(f"{workflow_id}: desired copies {result['previous']} → {result['desired']}.")


@workflow_app.command("stop")
def workflow_stop(workflow_id: str,
                  wait: Annotated[bool, typer.Option(help="Wait until every rank stopped")] = True) -> None:
    """Stop a workflow: ranks stopped, GPUs released, endpoint removed."""
    call(lambda api: api.stop_workflow(workflow_id))
    if not wait:
        console.print(f"Stop requested for {workflow_id}.")
        return
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        info = call(lambda api: api.describe_workflow(workflow_id))
        if info.get("status") != "running":
            console.print(f"Stopped {workflow_id} ({info.get('phase')}).")
            return
        time.sleep(0.5)
    raise fail(f"{workflow_id} is still stopping after 300 s; check `berth workflow describe {workflow_id}`.")


@workflow_app.command("log")
def workflow_log(workflow_id: str, job: Annotated[str | None, typer.Argument()] = None,
                 lines: Annotated[int, typer.Option()] = 200) -> None:
    """Print a job's log (e.g. vllm-rank-0); without JOB, list the jobs."""
    data = call(lambda api: api.workflow_log(workflow_id, job, lines))
    if job is None:
        console.print("Jobs: " + (", ".join(data["jobs"]) or "none yet"))
        return
    sys.stdout.write(data["text"] + ("\n" if data["text"] else ""))


# --- endpoints ---------------------------------------------------------------------------------------
@endpoints_app.command("list")
def endpoints_list(output: OutputOption = Format.TABLE) -> None:
    """List endpoints you may reach."""
    listing(output, lambda api: api.endpoints(),
            [("id", "ENDPOINT ID"), ("workflow_id", "WORKFLOW"), ("service", "SERVICE"), ("url", "URL"),
             ("scope", "SCOPE"), ("ready", "READY")])


endpoint_app.command("list", help="List endpoints you may reach (alias of `berth workflow endpoints list`).")(
    endpoints_list)


@endpoint_app.command("generate-token")
def endpoint_generate_token(endpoint_id: str,
                            expiration: Annotated[str, typer.Option(help="e.g. 30m, 8h, 7d")] = "8h",
                            output: OutputOption = Format.TABLE) -> None:
    """Mint a token bound to one endpoint, carrying your identity."""
    data = answer(output, lambda api: api.generate_token(endpoint_id, expiration))
    if data is None:
        return  # printed as JSON
    sys.stdout.write(data["token"] + "\n")


@endpoints_app.command("generate-token")
def endpoints_generate_token(endpoint_id: str, expiration: Annotated[str, typer.Option()] = "8h") -> None:
    """Mint a token bound to one endpoint (alias of `berth endpoint generate-token`)."""
    endpoint_generate_token(endpoint_id, expiration, Format.TABLE)


@endpoint_app.command("opencode-config")
def endpoint_opencode_config(
    endpoint_id: str,
    provider: Annotated[str, typer.Option(help="Provider key: models are <provider>/<model id>")] = "berth",
    output_limit: Annotated[int | None, typer.Option(help="limit.output (default: context/4, ≤ 8192)")]
    = None,
    verify: Annotated[bool, typer.Option(help="Ask the endpoint's /v1/models for the exact model id")] = True,
) -> None:
    """Print a ready opencode.json for an endpoint: base URL, {env:BERTH_TOKEN}, exact model id, limits."""
    from berth.opencode import TOKEN_ENV, ProviderTarget, opencode_config, preflight

    async def work(api: ApiClient) -> tuple[dict[str, Any], tuple[str, ...] | None, str | None]:
        facts = await api.endpoint_client_config(endpoint_id)
        if not verify:
            return facts, None, None
        token = (await api.generate_token(endpoint_id, "5m"))["token"]
        try:
            return facts, await preflight(facts["url"], token, ca_file=api.ca_file), None
        except BerthError as error:
            return facts, None, str(error)

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", provider):
        raise fail(f"--provider '{provider}' must be a plain name such as berth (it prefixes model ids).")
    facts, listed, problem = call(work)
    if problem:
        errors.print(f"[yellow]warning:[/] could not ask the endpoint ({problem}); using the model id its "
                     "workflow serves.", highlight=False, soft_wrap=True)
    model_ids = listed or (facts["model_id"],)
    try:
        target = ProviderTarget(url=facts["url"], model_ids=tuple(model_ids),
                                max_context=facts["max_context"], output_limit=output_limit, label="Berth")
        config = opencode_config({provider: target})
    except BerthError as error:
        raise fail(str(error)) from None
    emit_json(config)
    if not facts.get("tool_calling"):
        errors.print("[yellow]note:[/] this endpoint was started without --enable-auto-tool-choice: OpenCode "
                     "can chat but cannot read or edit files (add the tool-calling flags to ExtraArgs).",
                     highlight=False, soft_wrap=True)
    errors.print(f"Save as ~/.config/opencode/opencode.json (or a project's opencode.json), then: export "
                 f"{TOKEN_ENV}=$(berth endpoint generate-token {endpoint_id} --expiration 8h)",
                 highlight=False, soft_wrap=True)
    if str(facts["url"]).startswith("https://"):
        errors.print("If the cluster uses a private CA (`berth ca-cert` prints it), OpenCode must trust it: "
                     "export NODE_EXTRA_CA_CERTS=/path/to/cluster-ca.pem", highlight=False, soft_wrap=True)


# --- secrets -----------------------------------------------------------------------------------------
@secret_app.command("create")
def secret_create(
    ref: Annotated[str, typer.Argument(help="secret://user/NAME (or group/organization)")],
    value: Annotated[str | None, typer.Argument(help='For --type hf: \'{"token":"hf_…"}\'')] = None,
    kind: Annotated[str, typer.Option("--type", help="hf or value (value: read from standard input)")] = "value",
) -> None:
    """Create or replace a secret. Values never appear in listings or logs."""
    if value is None:
        if sys.stdin.isatty():
            raise fail("Give the value as an argument, or pipe it on standard input "
                       "(printf 'sk-…' | berth secret create …).")
        value = sys.stdin.read().rstrip("\n")
    created = call(lambda api: api.create_secret(ref, kind, value))
    console.print(f"Created {ref} (type {created['type']}).", highlight=False)


@secret_app.command("list")
def secret_list(output: OutputOption = Format.TABLE) -> None:
    """List the secrets you can use (names and types, never values)."""
    listing(output, lambda api: api.secrets(),
            [("ref", "SECRET"), ("type", "TYPE"), ("scope", "SCOPE"), ("owner", "OWNER"),
             ("created_by", "CREATED BY")])


@secret_app.command("delete")
def secret_delete(ref: str) -> None:
    """Delete a secret."""
    call(lambda api: api.delete_secret(ref))
    console.print(f"Deleted {ref}.", highlight=False)


# --- identity ----------------------------------------------------------------------------------------
@user_app.command("create")
def user_create(
    name: str,
    org: Annotated[str, typer.Option("--org", help="Organization")] = "default",
    group: Annotated[list[str] | None, typer.Option("--group", help="Group to join (repeatable)")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an administrator")] = False,
    output: OutputOption = Format.TABLE,
) -> None:
    """Create a user in an organization and groups (groups are created when missing)."""
    groups = list(group or [])
    user = answer(output, lambda api: api.create_user(name, org, groups, admin))
    if user is None:
        return  # printed as JSON
    console.print(f"Created user {user['name']} (organization {user['org']}, groups "
                  f"{', '.join(user['groups']) or 'none'}).", highlight=False)


@user_app.command("list")
def user_list(output: OutputOption = Format.TABLE) -> None:
    """List users (administrators: all; others: their organization)."""
    listing(output, lambda api: api.users(),
            [("name", "USER"), ("org", "ORGANIZATION"), ("groups", "GROUPS"), ("admin", "ADMIN")],
            rows=lambda rows: [{**r, "groups": ", ".join(r["groups"])} for r in rows])


@group_app.command("create")
def group_create(name: str, org: Annotated[str, typer.Option("--org", help="Organization")] = "default") -> None:
    """Create a group in an organization."""
    call(lambda api: api.create_group(name, org))
    console.print(f"Created group {name} in organization {org}.", highlight=False)


@group_app.command("add-member")
def group_add_member(group: str, user: str) -> None:
    """Add a user to a group (tokens minted from now on carry it)."""
    identity = call(lambda api: api.add_member(group, user))
    console.print(f"{user} is now in {', '.join(identity['groups'])}.", highlight=False)


@app.command()
def login(
    token: Annotated[str | None, typer.Option(help="An API token to use from now on")] = None,
    user: Annotated[str | None, typer.Option(help="Mint a token for this user (administrators)")] = None,
    expiration: Annotated[str, typer.Option(help="Lifetime of a minted token")] = "30d",
    api_url: Annotated[str | None, typer.Option(help="The control plane's URL")] = None,
    print_token: Annotated[bool, typer.Option("--print-token", help="Print the token instead of saving it")] = False,
) -> None:
    """Write the client config (API URL + token, mode 0600); BERTH_TOKEN still overrides it."""
    config = ClientConfig.load()
    if api_url:
        config.api_url = api_url
    if (token is None) == (user is None):
        raise fail("Give exactly one of --token T or --user NAME.")
    if user is not None:
        minted = call(lambda api: api.user_token(user, expiration))
        token = str(minted["token"])
    assert token is not None

    async def check() -> dict[str, Any]:
        async with ApiClient(config.api_url, token, ca_file=config.ca_file) as api:
            return await api.whoami()

    try:
        who = asyncio.run(check())
    except BerthError as error:
        raise fail(f"The token was refused: {error}") from None
    if print_token:
        sys.stdout.write(token + "\n")
        return
    path = ClientConfig(api_url=config.api_url, token=token, ca_file=config.ca_file).save()
    console.print(f"Logged in as {who['name']} (organization {who['org']}, groups "
                  f"{', '.join(who['groups']) or 'none'}); config written to {path}.", highlight=False)


def main() -> None:
    app()
