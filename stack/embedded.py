"""`berth up`: the embedded single-machine stack — Temporal dev server, control-plane API,
control worker, N node agents and the endpoint proxy — started in dependency order, stopped in reverse,
in the foreground or detached. While it runs, stack/supervisor.py starts a crashed component again with
back-off; stack/waits.py holds what start and stop wait to see through the API."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import ssl
import subprocess
import time
from typing import IO, Any

from berth.errors import ConflictError, UserInputError
from berth.processes import (
    pid_alive,
    port_open,
    spawn,
    stop_group_sync,
    stop_groups_sync,
    tail,
    wait_http_sync,
    wait_port_sync,
)
from berth.restarts import Backoff, RestartRecord
from berth.security import Identity, SigningKey
from berth.settings import (
    ClientConfig,
    ClusterSettings,
    StackPorts,
    StateLayout,
    admin_user,
    temporal_dynamic_config,
    venv_bin,
)
from berth.tls import TLSFiles, client_context, ensure_private_ca
from berth.tokens import previous_stack_token, revoke_previous_stack_token
from node.inventory import simulated_gpus
from stack.components import (
    Child,
    StackOptions,
    cli_argv,
    component_environment,
    temporal_environment,
)
from stack.state import read_stack, write_stack
from stack.supervisor import Supervisor
from stack.waits import wait_copies_released, wait_nodes_ready

# Connections that may wait for a restarting endpoint proxy (the kernel completes their handshakes).
PROXY_BACKLOG = 2048


class Stack:
    """Starts the components in dependency order and stops them in reverse."""

    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.layout = StateLayout(options.state_dir)
        self.ports = StackPorts(options.port_base)
        self.children: list[Child] = []
        self.info: dict[str, Any] = {}
        self.backoff = Backoff()
        self._lock: IO[str] | None = None
        self.tls: TLSFiles | None = None
        self.verify: ssl.SSLContext | bool = True
        self._proxy_socket: socket.socket | None = None

    @property
    def api_url(self) -> str:
        return f"{self.options.scheme}://127.0.0.1:{self.ports.api}"

    def _prepare_tls(self, env: dict[str, str]) -> None:
        """With TLS: the files (the operator's, or the private CA's, issued again near expiry) and every
        component's trust in the CA. Only the API and the proxy get the server key (`_server_env`)."""
        options = self.options
        if options.scheme != "https":
            return
        self.tls = options.tls_files or ensure_private_ca(self.layout.keys / "tls", options.tls_names)
        self.verify = client_context(self.tls.ca)
        env["BERTH_TLS_CA"] = str(self.tls.ca)

    def _server_env(self, env: dict[str, str]) -> dict[str, str]:
        if self.tls is None:
            return env
        return {**env, "BERTH_TLS_CERT": str(self.tls.cert), "BERTH_TLS_KEY": str(self.tls.key)}

    # --- lock ---------------------------------------------------------------------------------------
    def acquire_lock(self) -> None:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        handle = open(self.layout.lock_file, "a+")  # noqa: SIM115 — held for the stack's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            owner = read_stack(self.layout)
            pid = owner.get("pid", "?") if owner else "?"
            raise ConflictError(
                f"State dir {self.layout.root} is in use by a running Berth stack (pid {pid}). "
                f"Stop it with `berth down --state-dir {self.layout.root}` or choose another --state-dir."
            ) from None
        self._lock = handle

    def check_ports(self) -> None:
        busy = [p for p in (self.ports.temporal, self.ports.temporal_ui, self.ports.api, self.ports.proxy)
                if port_open("127.0.0.1", p)]
        if busy:
            raise ConflictError(
                f"Port(s) {', '.join(map(str, busy))} are already in use. Stop whatever holds them or pick "
                f"another base with --port-base (now {self.ports.base})."
            )

    # --- start --------------------------------------------------------------------------------------
    def _env(self, token: str) -> dict[str, str]:
        env = component_environment({**os.environ, **self.options.extra_env})
        env.update({
            "BERTH_STATE_DIR": str(self.layout.root),
            "BERTH_TEMPORAL_ADDRESS": f"127.0.0.1:{self.ports.temporal}",
            "BERTH_API_URL": self.api_url,
            "BERTH_TOKEN": token,
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def _start(self, name: str, argv: list[str], env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> Child:
        log = self.layout.logs / "stack" / f"{name}.log"
        # The state dir, not wherever `berth up` was typed: nothing found there may matter to a component.
        child = Child(name, spawn(argv, log, env=env, cwd=self.layout.root, pass_fds=pass_fds), log, argv, env,
                      RestartRecord(started_at=time.monotonic()), pass_fds=pass_fds)
        self.children.append(child)
        return child

    def _fail(self, child: Child, error: Exception) -> UserInputError:
        return UserInputError(f"{child.name} did not start: {error}. Last lines of {child.log}:\n{tail(child.log, 15)}")

    def start(self) -> dict[str, Any]:
        options = self.options
        if options.simulate_gpus:
            simulated_gpus(options.simulate_gpus, "check")  # validate the spec before anything starts
        if options.nodes < 1:
            raise UserInputError("--nodes must be at least 1.")
        self.check_ports()
        layout, ports = self.layout, self.ports
        settings = self._settings()
        signing = SigningKey.load_or_create(layout.keys)
        admin = Identity(user=admin_user(), groups=("default",), org="default",
                         admin=True)
        # Rotated at each start: the token the last `berth up` wrote is revoked once the API is up.
        previous, token = previous_stack_token(layout.client_config), signing.api_token(admin, kind="stack",
                                                                                      note="berth up")
        env = self._env(token)
        self._prepare_tls(env)
        if settings.hf_endpoint:
            env["HF_ENDPOINT"] = settings.hf_endpoint
        self._start_temporal()
        if options.hf_mirror is not None:
            mirror = self._start("hf-mirror", cli_argv() + ["hf-mirror", "--dir", str(options.hf_mirror),
                                                           "--port", str(ports.hf_mirror)], env)
            try:
                wait_port_sync("127.0.0.1", ports.hf_mirror, 60, mirror.process)
            except (TimeoutError, RuntimeError) as error:
                raise self._fail(mirror, error) from None
        api = self._start("api", cli_argv() + ["server", "--port", str(ports.api)], self._server_env(env))
        try:
            wait_http_sync(f"{self.api_url}/healthz", 60, api.process, verify=self.verify)
        except (TimeoutError, RuntimeError) as error:
            raise self._fail(api, error) from None
        revoke_previous_stack_token(self.api_url, token, previous, verify=self.verify)
        self._start("worker", cli_argv() + ["worker"], env)
        self._start_nodes(env)
        self._start_proxy(settings, env, token)
        return self._ready(settings, token)

    def _settings(self) -> ClusterSettings:
        """The cluster settings with this stack's proxy URL (and mirror), saved for every component."""
        options, layout, ports = self.options, self.layout, self.ports
        settings = ClusterSettings.load(layout.root)
        settings.proxy_url = f"{options.scheme}://127.0.0.1:{ports.proxy}"
        if options.hf_mirror is not None:
            settings.hf_endpoint = f"http://127.0.0.1:{ports.hf_mirror}"
        settings.save(layout.root)
        return settings

    def _start_temporal(self) -> None:
        layout, ports = self.layout, self.ports
        layout.temporal_db.parent.mkdir(parents=True, exist_ok=True)
        temporal = self._start("temporal", [
            str(venv_bin("temporal")), "server", "start-dev", "--db-filename", str(layout.temporal_db),
            # Loopback only, the UI too: whoever reaches Temporal can poll, cancel and terminate.
            "--ip", "127.0.0.1", "--port", str(ports.temporal), "--ui-ip", "127.0.0.1",
            "--ui-port", str(ports.temporal_ui),
            "--http-port", str(ports.temporal_http), "--metrics-port", str(ports.temporal_metrics),
            "--log-level", "warn",
            *(argument for pair in temporal_dynamic_config() for argument in ("--dynamic-config-value", pair)),
        ], temporal_environment())
        try:
            wait_port_sync("127.0.0.1", ports.temporal, 60, temporal.process)
        except (TimeoutError, RuntimeError) as error:
            raise self._fail(temporal, error) from None

    def _start_nodes(self, env: dict[str, str]) -> None:
        options, ports = self.options, self.ports
        for index in range(options.nodes):
            argv = cli_argv() + ["node", "--id", f"node-{index + 1}",
                                 "--port-start", str(ports.node_ports_start + index * 100)]
            if options.simulate_gpus:
                argv += ["--simulate-gpus", options.simulate_gpus]
            if options.engine:
                argv += ["--engine", options.engine]
            if (metrics_port := ports.node_metrics(index)) is not None:
                argv += ["--metrics-port", str(metrics_port)]
            # One spare LiteLLM per machine (activities/litellm_standby.py): these nodes share this one, and
            # a front goes to the first ready node (server/store/placement.py), so only node-1 keeps one ahead.
            self._start(f"node-{index + 1}", argv, env if index == 0 else {**env, "BERTH_LITELLM_STANDBY": "off"})

    def _start_proxy(self, settings: ClusterSettings, env: dict[str, str], token: str) -> None:
        """The endpoint proxy, once it answers and the node agents registered."""
        ports = self.ports
        # The supervisor owns the proxy's listening socket and hands it to each proxy process it starts:
        # while a crashed proxy is started again, clients' connections wait in the socket's backlog
        # (a second or two) instead of being refused.
        self._proxy_socket = socket.create_server(("127.0.0.1", ports.proxy), backlog=PROXY_BACKLOG)
        fd = self._proxy_socket.fileno()
        proxy = self._start("proxy", cli_argv() + ["proxy", "--port", str(ports.proxy), "--fd", str(fd)],
                            self._server_env(env), pass_fds=(fd,))
        try:
            wait_http_sync(f"{settings.proxy_url}/healthz", 60, proxy.process, verify=self.verify)
            wait_nodes_ready(self.api_url, token, self.options.nodes, self.children, self.verify)
        except (TimeoutError, RuntimeError) as error:
            raise self._fail(proxy, error) from None

    def _ready(self, settings: ClusterSettings, token: str) -> dict[str, Any]:
        """Write the client config (the stack's token) and stack.json: `berth up` is ready."""
        options, layout, ports = self.options, self.layout, self.ports
        client = ClientConfig(api_url=self.api_url, token=token, ca_file=str(self.tls.ca) if self.tls else None)
        client.save(layout.client_config)
        if options.write_user_config:
            client.save()
        self.info = {
            "pid": os.getpid(), "state_dir": str(layout.root), "ready": True, "port_base": ports.base,
            "restarts_enabled": settings.restart_components,
            "api_url": self.api_url, "proxy_url": settings.proxy_url,
            "ca_file": str(self.tls.ca) if self.tls else None,
            "temporal_address": f"127.0.0.1:{ports.temporal}", "temporal_ui": f"http://127.0.0.1:{ports.temporal_ui}",
            "hf_endpoint": settings.hf_endpoint,
            "node_metrics": [f"http://127.0.0.1:{port}/metrics" for index in range(options.nodes)
                             if (port := ports.node_metrics(index)) is not None],
            "children": [child.status() for child in self.children],
        }
        write_stack(layout, self.info)
        return self.info

    # --- stop ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        # Reverse order: proxy and nodes first (ranks stop while Temporal can still record it).
        nodes_stopped = False
        # With Temporal gone (crashed) nothing can record the copies' ends: no use waiting for it. The node
        # agents marked their ranks stopped by shutdown instead, for the next `berth up` to read.
        temporal_up = any(c.name == "temporal" and c.process.poll() is None for c in self.children)
        for child in reversed(self.children):
            if child.name == "worker" and nodes_stopped and temporal_up:
                wait_copies_released(self.api_url, self.layout.client_config, self.verify, 15)
            if child.name.startswith("node"):
                if not nodes_stopped:
                    # Every node agent at once: each stops its own ranks and fronts, none waits on another,
                    # so `down` takes the slowest node's time, not the sum (a 4-node stack: ~4× faster).
                    nodes = [c for c in self.children if c.name.startswith("node")]
                    stop_groups_sync([c.process.pid for c in nodes if c.process.poll() is None], grace_s=40)
                    nodes_stopped = True
            elif child.process.poll() is None:
                stop_group_sync(child.process.pid, grace_s=15)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=1)
        self.children.clear()
        if self._proxy_socket is not None:
            self._proxy_socket.close()
            self._proxy_socket = None
        with contextlib.suppress(OSError):
            self.layout.stack_file.unlink()

    def supervise(self, stop_requested: list[bool]) -> None:
        """Once started: restart crashed components until a stop request (stack/supervisor.py)."""
        Supervisor(self.children, self.layout, self.info, self.backoff).run(stop_requested)


def run_foreground(options: StackOptions, on_ready: Any) -> None:
    stack = Stack(options)
    stack.acquire_lock()
    stop_requested: list[bool] = []

    def request_stop(_signum: int, _frame: Any) -> None:
        stop_requested.append(True)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        info = stack.start()
        on_ready(info)
        stack.supervise(stop_requested)
    finally:
        stack.stop()


def foreground_command(options: StackOptions) -> list[str]:
    """`berth up` without --detach for these options, every path absolute: the supervisor runs in the
    state dir, so nothing of the caller's working directory may be left to resolve (or to import)."""
    argv = cli_argv() + ["up", "--state-dir", str(options.state_dir.resolve()), "--port-base", str(options.port_base),
                         "--nodes", str(options.nodes)]
    if options.simulate_gpus:
        argv += ["--simulate-gpus", options.simulate_gpus]
    if options.engine:
        argv += ["--engine", options.engine]
    if options.hf_mirror is not None:
        argv += ["--hf-mirror", str(options.hf_mirror.resolve())]
    if options.tls_files is not None:
        argv += ["--tls-cert", str(options.tls_files.cert), "--tls-key", str(options.tls_files.key),
                 "--tls-ca", str(options.tls_files.ca)]
    elif options.tls:
        argv.append("--tls")
    for name in options.tls_names:
        argv += ["--tls-name", name]
    return argv


def start_detached(options: StackOptions) -> dict[str, Any]:
    """Re-run `berth up` without --detach in its own session and wait until it reports ready."""
    layout = StateLayout(options.state_dir.resolve())
    existing = read_stack(layout)
    if existing and pid_alive(int(existing.get("pid", 0))):
        raise ConflictError(
            f"State dir {layout.root} is in use by a running Berth stack (pid {existing['pid']}). "
            f"Stop it with `berth down --state-dir {layout.root}` or choose another --state-dir."
        )
    log = layout.logs / "stack" / "supervisor.log"
    with contextlib.suppress(OSError):
        layout.stack_file.unlink()
    layout.root.mkdir(parents=True, exist_ok=True)
    process = spawn(foreground_command(options), log, env=component_environment(dict(os.environ)), cwd=layout.root)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        info = read_stack(layout)
        if info and info.get("ready") and info.get("pid") == process.pid:
            return info
        if process.poll() is not None:
            raise UserInputError(f"The stack did not start (status {process.returncode}):\n{tail(log, 20)}")
        time.sleep(0.2)
    stop_group_sync(process.pid)
    raise UserInputError(f"The stack did not become ready within 180 s; see {log}:\n{tail(log, 20)}")
