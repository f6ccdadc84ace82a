"""The component processes `berth up` runs (`berth server`, `worker`, `proxy`, `gateway`, `hf-mirror`, the
node agent), also run by hand on a multi-host cluster; and `berth admin-token` for setting one up."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from berth.errors import BerthError, UserInputError
from berth.ports import DEFAULT_PORT_BASE
from cli.common import StateDirOption, fail, resolve_state_dir

T = TypeVar("T")

# Registered without a name: its commands are the root's (`berth server`, not `berth components server`).
app = typer.Typer()


def _observed(component: str) -> None:
    """A component's log format (BERTH_LOG_FORMAT) and tracing (BERTH_OTEL_ENDPOINT), set before it starts."""
    from berth.log_format import configure_logging
    from berth.telemetry import setup_tracing

    configure_logging(component)
    setup_tracing(f"berth-{component}")


def _given(read: Callable[[], T]) -> T:
    """A setting the component is given in its environment (settings.component_…): missing, one line, exit 1."""
    try:
        return read()
    except UserInputError as error:
        raise fail(str(error)) from None


@app.command()
def server(port: Annotated[int, typer.Option()] = DEFAULT_PORT_BASE + 2,
           host: Annotated[str, typer.Option()] = "127.0.0.1") -> None:
    """Run the control-plane REST API."""
    from berth import compiled

    compiled.install()  # the HTTP protocol under every request (berth/http_connection.py), where built and current
    import uvicorn

    from berth import settings
    from berth.http_connection import guarded_protocol
    from berth.settings import ServerTLS
    from berth.settings.connections import ConnectionLimits
    from berth.settled_server import serve
    from server.app import build_context, create_app

    try:
        tls, limits = ServerTLS.from_env(), ConnectionLimits.from_env()
    except BerthError as error:
        raise fail(str(error)) from None
    _observed("server")
    context = build_context(_given(settings.component_state_dir), _given(settings.temporal_address),
                            settings.database_url())
    serve(uvicorn.Config(create_app(context), host=host, port=port, log_level="warning",
                         http=guarded_protocol(limits), **(tls.uvicorn_options() if tls else {})))


@app.command()
def worker() -> None:
    """Run the control worker (workflows and control-side activities)."""
    from berth import settings
    from control.worker import main as worker_main

    _observed("worker")
    worker_main(_given(settings.component_state_dir), _given(settings.temporal_address),
                _given(settings.component_api_url), _given(settings.component_token))


@app.command()
def proxy(port: Annotated[int, typer.Option()] = DEFAULT_PORT_BASE + 3,
          host: Annotated[str, typer.Option()] = "127.0.0.1",
          fd: Annotated[int | None, typer.Option(help="Serve on this inherited listening socket "
                                                     "(its owner keeps it open across restarts)")] = None) -> None:
    """Run the endpoint proxy (the public entry to every endpoint)."""
    from berth import compiled, settings

    compiled.install()  # before the hot path is imported: its C extensions where built and current
    from gateway.endpoint.run import run_endpoint_proxy

    _observed("proxy")
    run_endpoint_proxy(_given(settings.component_api_url), _given(settings.component_token), host, port, fd=fd)


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
    from berth import compiled, settings

    compiled.install()  # the edge kit's routing and credentials compiled, as in the endpoint proxy
    from gateway.models.model_gateway import run_gateway

    master_key = settings.gateway_master_key()
    if master_key and not endpoint_id:
        raise fail("BERTH_GATEWAY_MASTER_KEY needs --endpoint-id (the gateway's endpoint, which its callers' "
                   "assertions name).")
    run_gateway(_given(settings.component_api_url), _given(settings.component_token), host, port,
                settings.replica_keys_token(), routing_policy=routing_policy, refresh_s=discovery_interval,
                master_key=master_key, endpoint_id=endpoint_id)


@app.command("admin-token")
def admin_token(state_dir: StateDirOption = None,
                user: Annotated[str, typer.Option(help="Administrator user name")] = "admin") -> None:
    """Mint an administrator API token from the state dir's signing key (multi-host set-up)."""
    from berth.security import Identity, SigningKey
    from berth.settings import StateLayout

    key = SigningKey.load_or_create(StateLayout(resolve_state_dir(state_dir)).keys)
    identity = Identity(user=user, groups=("default",), org="default", admin=True)
    # Listed by `berth token list` from its first use, revocable like any other.
    sys.stdout.write(key.api_token(identity, kind="key-holder", note="berth admin-token") + "\n")


@app.command("hf-mirror")
def hf_mirror_command(directory: Annotated[Path, typer.Option("--dir")],
                      port: Annotated[int, typer.Option()] = DEFAULT_PORT_BASE + 4) -> None:
    """Serve a directory of model repositories as an offline Hugging Face mirror."""
    from berth import settings
    from berth.hf_mirror import serve_forever

    serve_forever(directory, port, _given(settings.component_state_dir))


def run_node_agent(node_id: str | None, engine: str | None, simulate_gpus: str | None, address: str,
                   port_start: int, taints: tuple[str, ...], metrics_port: int | None = None,
                   site: str | None = None, failure_domain: str | None = None) -> None:
    """The node agent `berth node` (no subcommand) runs on this machine."""
    import socket

    from activities.ranks import ENGINES
    from berth import settings
    from node.agent import AgentConfig, run_agent

    if engine is not None and engine not in ENGINES:
        raise fail(f"--engine must be one of {', '.join(ENGINES)}, not '{engine}'.")
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise fail(f"--metrics-port must be a port number from 0 (not served) to 65535, not {metrics_port}.")
    labels = site_labels(site, failure_domain)
    _observed("node")  # httpx's line per poll and scrape quietened
    run_agent(AgentConfig(
        node_id=node_id or socket.gethostname(), state_dir=_given(settings.component_state_dir),
        api_url=_given(settings.component_api_url), token=_given(settings.component_token),
        temporal_address=_given(settings.temporal_address), address=address, engine=engine,
        simulate_gpus=simulate_gpus, port_start=port_start, taints=taints, metrics_port=metrics_port or None,
        labels=labels or None,
    ))


def site_labels(site: str | None, failure_domain: str | None) -> dict[str, str]:
    """--site and --failure-domain as the labels the agent reports them under (berth/sites.py), checked first: a
    heartbeat with a malformed one would be refused at every beat."""
    from berth.sites import FAILURE_DOMAIN_LABEL, SITE_LABEL, label_problem

    labels = {key: value for key, value in ((SITE_LABEL, site), (FAILURE_DOMAIN_LABEL, failure_domain)) if value}
    problem = label_problem(labels)
    if problem is not None:
        raise fail(f"--site/--failure-domain: {problem}.")
    return labels
