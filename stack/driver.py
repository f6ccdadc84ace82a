"""The stack driver: a real embedded stack in a state dir of the caller's, driven through the real CLI
(`berth up --detach`), and what to look at on a running one. Shared by tests, scripts/demo.py and bench/."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import ssl
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from berth.processes import berth_python, free_port, spawn, stop_group_sync, wait_http_sync
from berth.settings import port_slice_spec

KEEPALIVE_S = 2.0  # below the API server's keep-alive timeout (uvicorn's 5 s)

REPO = Path(__file__).resolve().parent.parent


def litellm_bin() -> str | None:
    """The litellm executable for node agents: BERTH_LITELLM_BIN, this checkout's .venv-litellm, or, in a
    linked git worktree (which has none of its own), the main checkout's."""
    return _tool("BERTH_LITELLM_BIN", Path(".venv-litellm") / "bin" / "litellm")


def opencode_bin() -> str | None:
    """The opencode executable for node agents, found like litellm_bin (`make opencode` installs it)."""
    return _tool("BERTH_OPENCODE_BIN", Path(".tools") / "opencode" / "node_modules" / ".bin" / "opencode")


def _tool(variable: str, relative: Path) -> str | None:
    if os.environ.get(variable):
        return os.environ[variable]
    own = REPO / relative
    if own.exists():
        return str(own)
    common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                            capture_output=True, text=True, check=False, cwd=REPO).stdout.strip()
    candidate = Path(common).parent / relative
    return str(candidate) if common and candidate.exists() else None


def ports_free(base: int, span: int = 8) -> bool:
    for port in range(base, base + span):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_slice() -> tuple[int, int]:
    """The [low, high) range stack port bases are drawn from: below the kernel's ephemeral range, since a
    port found free there can be taken a moment later by any outgoing connection or `bind(0)` (CI saw
    Temporal's port go that way). BERTH_PORT_SLICE=K/N keeps to the K-th of N equal slices, so that
    parallel test workers (tests/conftest.py sets it per xdist worker) never draw overlapping ranges."""
    low, high = 10000, max(10010, _ephemeral_low() - 600)
    spec = port_slice_spec()
    if spec:
        index, count = spec
        width = (high - low) // count
        low, high = low + index * width, low + (index + 1) * width - 500
    return low, max(low + 10, high)


def free_port_base() -> int:
    # The stack uses base..base+9, base+20.. (its nodes' /metrics) and base+100..base+499.
    low, top = port_slice()
    for _ in range(200):
        base = random.randrange(low, top, 10)
        if ports_free(base, 10) and ports_free(base + 20, 4) and ports_free(base + 100, 100 * 4):
            return base
    raise RuntimeError("no free port range")


@dataclass
class RunningStack:
    state_dir: Path
    port_base: int
    nodes: int = 1
    simulate_gpus: str | None = "4x80GB"
    engine: str | None = None
    hf_mirror: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    tls: bool = False  # `berth up --tls`: the API and the proxy serve https with the state dir's private CA
    tls_files: tuple[Path, Path, Path] | None = None  # the operator's --tls-cert, --tls-key, --tls-ca
    info: dict[str, Any] = field(default_factory=dict)
    cwd: Path = REPO  # where the CLI runs: only what it reads from the command line depends on it
    _client: httpx.Client | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        # Berth's processes run with -P (never the working directory on sys.path), so the checkout under
        # test reaches them, and every component the stack starts, through PYTHONPATH.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
        for variable, executable in (("BERTH_LITELLM_BIN", litellm_bin()), ("BERTH_OPENCODE_BIN", opencode_bin())):
            if executable:
                env[variable] = executable
        env["BERTH_CONFIG"] = str(self.state_dir / "client.json")
        env["BERTH_STATE_DIR"] = str(self.state_dir)
        env.pop("BERTH_API_URL", None)
        env.pop("BERTH_TOKEN", None)
        return env

    def cli(self, *args: str, check: bool = True, timeout: float = 300, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*berth_python("cli"), *args], capture_output=True, text=True,
                                timeout=timeout, env=env or self.env, cwd=self.cwd, input=input)
        if check and result.returncode != 0:
            raise AssertionError(f"berth {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json").stdout)

    def up_args(self) -> list[str]:
        args = ["up", "--detach", "--state-dir", str(self.state_dir), "--port-base", str(self.port_base),
                "--nodes", str(self.nodes)]
        if self.simulate_gpus:
            args += ["--simulate-gpus", self.simulate_gpus]
        if self.engine:
            args += ["--engine", self.engine]
        if self.hf_mirror:
            args += ["--hf-mirror", str(self.hf_mirror)]
        if self.tls:
            args.append("--tls")
        if self.tls_files:
            for option, path in zip(("--tls-cert", "--tls-key", "--tls-ca"), self.tls_files, strict=True):
                args += [option, str(path)]
        return args

    def start(self) -> RunningStack:
        env = self.env
        env["BERTH_CONFIG"] = str(self.state_dir / "user-config.json")
        self.cli(*self.up_args(), env=env, timeout=240)
        self.info = json.loads((self.state_dir / "stack.json").read_text())
        if self._client is not None:  # a stack started again may serve another CA
            self._client.close()
            self._client = None
        return self

    def stop(self) -> None:
        if (self.state_dir / "stack.json").exists():
            self.cli("down", "--state-dir", str(self.state_dir), check=False, timeout=180)
        if self._client is not None:
            self._client.close()

    @property
    def token(self) -> str:
        return json.loads((self.state_dir / "client.json").read_text())["token"]

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        # One client for the stack's life (tests poll describe several times a second): a client a request made a
        # TLS context each time, ~20 ms of CPU. The token is read each time: `berth up` again rotates it.
        client = self._client
        if client is None or client.is_closed:
            # An idle connection is dropped here before the API's server drops it (uvicorn: after 5 s, httpx's own
            # default too): otherwise a request sent as the server closes it fails "Server disconnected" (ci50).
            client = self._client = httpx.Client(verify=self.verify, timeout=30,
                                                 limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S))
        return client.request(method, self.info["api_url"] + path,
                              headers={"Authorization": f"Bearer {self.token}"}, **kwargs)

    def node_views(self) -> list[dict[str, Any]]:
        """The nodes as `GET /v1/nodes` says (what `berth node list -o json` prints), for a test's waits: a CLI
        process each poll cost a core ~0.4 s of CPU five times a second."""
        return self.api("GET", "/v1/nodes").raise_for_status().json()  # type: ignore[no-any-return]

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """What an httpx call to this stack's API or proxy trusts: its private CA with --tls."""
        return ssl.create_default_context(cafile=self.info["ca_file"]) if self.info.get("ca_file") else True

    def start_entry(self, entry: str, values: str = "", watch: bool = True) -> str:
        args = ["workflow", "catalog", "start", entry]
        if values:
            args += ["--values", values]
        if watch:
            args.append("--watch")
        result = self.cli(*args, timeout=600)
        return result.stdout.strip().splitlines()[0]

    def describe(self, workflow_id: str) -> dict[str, Any]:
        return self.api("GET", f"/v1/workflows/{workflow_id}").json()  # type: ignore[no-any-return]

    def wait_phase(self, workflow_id: str, phases: set[str], timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        info: dict[str, Any] = {}
        while time.monotonic() < deadline:
            info = self.describe(workflow_id)
            if info.get("phase") in phases:
                return info
            time.sleep(0.25)
        raise AssertionError(f"{workflow_id} never reached {phases}; last: {json.dumps(info)[:2000]}")

    def endpoint(self, workflow_id: str) -> dict[str, Any]:
        for row in self.cli_json("endpoint", "list"):
            if row["workflow_id"] == workflow_id:
                return row  # type: ignore[no-any-return]
        raise AssertionError(f"no endpoint for {workflow_id}")

    def token_for(self, endpoint_id: str, expiration: str = "1h") -> str:
        return self.cli("endpoint", "generate-token", endpoint_id, "--expiration", expiration).stdout.strip()

    def replica_key(self, copy_id: str) -> str:
        """A copy's vLLM key, derived from the state dir as its node does (an operator's view, not a user's)."""
        from berth.security import ReplicaKeys

        return ReplicaKeys.load_or_create(self.state_dir / "keys").for_copy(copy_id)

    def copy_metrics(self, copy: Mapping[str, Any]) -> str:
        """A copy's own /metrics text (`copy`: a copy or replica as `describe` lists it), read with its key:
        a copy's port answers only Berth on every path but /health."""
        headers = {"Authorization": f"Bearer {self.replica_key(copy['copy_id'])}"}
        response = httpx.get(f"{copy['url']}/metrics", headers=headers, timeout=5)
        response.raise_for_status()
        return response.text


def start_gateway(stack: RunningStack, token: str, keys_token: str | None = None
                  ) -> tuple[subprocess.Popen[bytes], str]:
    """`berth gateway` for the owner of `token` on a free port, once /health answers: (process, URL).
    `keys_token` reads the copies' keys as a node gives the catalog gateway (an admin `token` needs none).
    Stop it with `berth.processes.stop_group_sync(process.pid)`."""
    port = free_port()
    env = dict(stack.env, BERTH_API_URL=stack.info["api_url"], BERTH_TOKEN=token)
    if keys_token:
        env["BERTH_REPLICA_KEYS_TOKEN"] = keys_token
    process = spawn([*berth_python("cli"), "gateway", "--port", str(port)], stack.state_dir / "gateway.log",
                    env=env, cwd=stack.state_dir)
    try:
        wait_http_sync(f"http://127.0.0.1:{port}/health", 60, process)
    except BaseException:
        stop_group_sync(process.pid, 5)
        raise
    return process, f"http://127.0.0.1:{port}"


def add_node_agent(stack: RunningStack, node_id: str, simulate_gpus: str,
                   extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """One more node agent joining the stack, with its own environment (e.g. a slower simulator: the
    ranks inherit it), on the next free block of 100 ports, once the API lists it ready. Stop the
    workflows that use it first, then `berth.processes.stop_group_sync(process.pid)`."""
    blocks = 1 + stack.nodes + len(list((stack.state_dir / "logs" / "extra-nodes").glob("*.log")))
    env = dict(stack.env, BERTH_API_URL=stack.info["api_url"], BERTH_TOKEN=stack.token,
               BERTH_TEMPORAL_ADDRESS=stack.info["temporal_address"], **(extra_env or {}))
    process = spawn([*berth_python("cli"), "node", "--id", node_id, "--simulate-gpus", simulate_gpus,
                     "--port-start", str(stack.port_base + 100 * blocks)],
                    stack.state_dir / "logs" / "extra-nodes" / f"{node_id}.log", env=env, cwd=stack.state_dir)
    try:
        wait_for(lambda: any(n["id"] == node_id and n.get("state") == "ready"
                             for n in stack.api("GET", "/v1/nodes").json()), 60, f"node agent {node_id}")
    except BaseException:
        stop_group_sync(process.pid, 5)
        raise
    return process


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (e.g. a state dir): orphan detection."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            if text in cmdline and int(pid) != os.getpid():
                found.append(f"{pid}: {cmdline}")
    return found


def rank_record(state_dir: Path, copy_id: str, rank: int) -> dict[str, Any]:
    """The pidfile (`rank.json`) a node agent keeps for a running rank, with the node it runs on."""
    return _process_record(state_dir, f"ranks/{copy_id}-r{rank}/rank.json", f"rank {rank} of {copy_id}")


def service_record(state_dir: Path, workflow_id: str, name: str = "litellm") -> dict[str, Any]:
    """The pidfile (`service.json`) a node agent keeps for a running service, with the node it runs on."""
    return _process_record(state_dir, f"services/{workflow_id}.{name}/service.json", f"{name} of {workflow_id}")


def _process_record(state_dir: Path, pattern: str, what: str) -> dict[str, Any]:
    for path in (state_dir / "nodes").glob(f"*/{pattern}"):
        record = json.loads(path.read_text())
        record["node_id"] = path.parents[2].name
        return record  # type: ignore[no-any-return]
    raise AssertionError(f"no running {what} under {state_dir / 'nodes'}")


def process_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def gpus_held(stack: RunningStack, prefix: str) -> int:
    return sum(1 for n in stack.node_views() for g in n["gpus"] if (g.get("allocated_to") or "").startswith(prefix))


def wait_for(predicate: Any, timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
