"""Where Berth keeps its state and which ports the embedded stack uses.

Precedence (documented once, here): packaged defaults < the state dir's `cluster.json` < `BERTH_…`
environment variables. The client config (API URL + token) is separate: see `ClientConfig`.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, TypedDict

from pydantic import BaseModel, Field

from berth.client_config import (  # noqa: F401 — tls_ca_file re-exported: berth.settings is the one import
    DEFAULT_API_URL,
    client_config_path,
    client_config_values,
    tls_ca_file,
)
from berth.errors import UserInputError
from berth.ports import DEFAULT_PORT_BASE as DEFAULT_PORT_BASE  # re-exported: the one import of settings

TEMPORAL_NAMESPACE = "default"
CONTROL_TASK_QUEUE = "berth-control"
NODES_TASK_QUEUE = "berth-nodes"  # any node agent: jobs that need a node but no particular one


def node_task_queue(node_id: str) -> str:
    return f"node.{node_id}"


def default_state_dir() -> Path:
    env = os.environ.get("BERTH_STATE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "berth"


def port_slice_spec() -> tuple[int, int] | None:
    """`BERTH_PORT_SLICE=K/N`: draw stack port bases from the K-th of N equal slices only (parallel test
    workers, one slice each, so their stacks never overlap); None when unset."""
    spec = os.environ.get("BERTH_PORT_SLICE", "").strip()
    if not spec:
        return None
    index, _, count = spec.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise UserInputError(f"BERTH_PORT_SLICE={spec!r} is not K/N with 0 <= K < N (e.g. 1/4)")
    return int(index), int(count)


def venv_bin(name: str) -> Path:
    """A console script installed beside the running interpreter (the project's virtualenv)."""
    return Path(sys.executable).parent / name


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]  # berth/settings/__init__.py → the checkout


@dataclass(frozen=True)
class StackPorts:
    """The embedded stack's fixed ports, all derived from one base so several stacks can coexist."""

    base: int

    @property
    def temporal(self) -> int:
        return self.base

    @property
    def temporal_ui(self) -> int:
        return self.base + 1

    @property
    def api(self) -> int:
        return self.base + 2

    @property
    def proxy(self) -> int:
        return self.base + 3

    @property
    def hf_mirror(self) -> int:
        return self.base + 4

    @property
    def temporal_http(self) -> int:
        return self.base + 5

    @property
    def temporal_metrics(self) -> int:
        return self.base + 6

    def node_metrics(self, index: int) -> int | None:
        """The /metrics port of the stack's node `index` (0-based): base+20+index, for the first 80 nodes (the
        rest serve none: base+100 on is the nodes' port blocks)."""
        return self.base + 20 + index if 0 <= index < 80 else None

    @property
    def node_ports_start(self) -> int:
        """Ranks and services get ports from here on; each node agent owns a block of 100."""
        return self.base + 100


HF_HUB_ENDPOINT = "https://huggingface.co"


class ClusterSettings(BaseModel):
    """Cluster-wide settings an administrator sets (state dir `cluster.json`, `BERTH_…` env)."""

    max_nodes_per_copy: int = Field(8, ge=1, description="Nodes one copy may span; more is rejected")
    hf_endpoint: str | None = Field(None, description="HF_ENDPOINT for weight downloads (a mirror)")
    publish_jwks: bool = Field(True, description="Publish caller-assertion signing keys (JWKS)")
    max_token_expiration_s: int = Field(30 * 24 * 3600, ge=60, description="Longest endpoint token")
    max_api_token_expiration_s: int = Field(90 * 24 * 3600, ge=60, description="Longest API token a user "
                                            "or an administrator may mint (`berth login --expiration`)")
    token_revocation_refresh_s: float = Field(2.0, gt=0, le=60, description="How stale an API process's "
                                              "copy of the revocation list may be (revoked on the same "
                                              "process: refused at once)")
    node_offline_after_s: float = Field(60.0, gt=0, description="Silent node becomes offline")
    placement_backend: Literal["berth", "slurm"] = Field("berth", description="Who places copies: Berth's "
                                   "node agents, or Slurm (each copy one job; the `slurm` section's settings)")
    placement_policy: str = Field("pack", pattern="^(pack|spread)$",
                                  description="pack: fill busy nodes first; spread: prefer empty nodes")
    # GPU health (server/gpu_health.py): placement skips a GPU whose last known temperature is over this (0: no
    # limit). 90 °C: past the maximum operating temperature of NVIDIA's data-centre GPUs (85-87 °C for A100/H100),
    # where they slow their clocks; a GPU that hot is failing to cool, and a new copy would only make it hotter.
    max_gpu_temp_c: Annotated[int, Field(ge=0, le=255, description="Placement skips a GPU hotter than this, in "
                                         "°C, as its node's heartbeats last read it (0: no limit)")] = 90
    # An uncorrected ECC error corrupts what the GPU computes and, on A100/H100, wants a GPU reset (which clears the
    # volatile count): NVIDIA's advice is to stop using the GPU until then. So on by default.
    reject_ecc: Annotated[bool, Field(description="Placement skips a GPU with uncorrected volatile ECC errors "
                                      "(until a reset or reboot clears them)")] = True
    rank_heartbeat_timeout_s: float = Field(30.0, ge=2, description="A rank's (or service's) node agent silent "
                                            "this long: its workflow asks a restarted agent to adopt it")
    rank_adopt_window_s: float = Field(60.0, gt=0, description="No agent adopted the rank within this: the "
                                       "rank is lost and its copy fails as a unit (a service: started again)")
    # Liveness of ready copies, as a Kubernetes livenessProbe (periodSeconds, timeoutSeconds,
    # failureThreshold=3): a hung engine (alive, socket open, nothing answers) is failed and re-placed.
    health_check_interval_s: float = Field(5.0, ge=0, description="A ready copy's leader rank is probed on "
                                           "/health this often (0 = never)")
    health_check_timeout_s: float = Field(2.0, gt=0, description="A /health probe unanswered this long failed")
    health_failures_to_fail: int = Field(3, ge=1, description="Failed /health probes in a row that fail the "
                                         "copy as a unit (its pool then re-places it)")
    replace_backoff_s: float = Field(5.0, ge=0, description="Wait before a pool re-places its second failed copy "
                                     "in a row (the first goes at once); doubles with each further one")
    replace_backoff_max_s: float = Field(120.0, ge=0, description="Longest wait before re-placing a failed copy")
    proxy_url: str = Field("http://127.0.0.1:18233", description="Public base URL of the endpoint proxy")
    max_request_body_bytes: int = Field(1024 * 1024, ge=4096, description="Largest request body the API "
                                        "reads (Content-Length or streamed); larger ones get 413")
    allow_trust_remote_code: bool = Field(False, description="Let ExtraArgs carry --trust-remote-code and "
                                          "the other flags that make vLLM run code of the sender's choosing "
                                          "(catalog.engine_flags); off: refused at submission")
    container_runtime: str = Field("", max_length=64, description="Container runtime for entries' Image "
                                   "parameter; none is supported by this version, so an Image other than the "
                                   "default is refused at submission (empty: engines run bare-metal)")
    key_max_ttl: str = Field("90d", pattern=r"^\d{1,9}[smhdw]$", description="Longest lifetime of an API key "
                             "(`berth key create --ttl`), e.g. 90d; an endpoint's `key_max_ttl` annotation "
                             "may cap it further")
    restart_components: bool = Field(True, description="`berth up` starts a crashed component again (0.5 s "
                                     "back-off doubling to 30 s); false: it only reports the exit")
    # The model registry (issue 16): where pre-staged weights may be registered from, how many files a
    # model may have, the managed cache's budget, and the key model signatures are checked under.
    model_dirs: str = Field("", max_length=4096, description="Directories (os.pathsep-separated) a model "
                            "may be registered from as a pre-staged path; empty: none")
    model_max_files: int = Field(10_000, ge=1, le=1_000_000, description="Most files a model may have "
                                 "(Scanning refuses more)")
    model_cache_bytes: int = Field(0, ge=0, description="The managed model cache's budget for `berth model "
                                   "cache evict` with no --budget-bytes (0: no budget)")
    model_signing_secret: str = Field("", max_length=300, description="secret://…/NAME holding the key "
                                      "model signatures are HMAC-SHA256s under; empty: a signed model fails")
    # The cluster's event stream (`berth events`, docs/events.md): history, kept this long and at most this many
    # rows, whichever bound is met first; pruned as events are written (server/store/events.py).
    events_keep_days: float = Field(30.0, gt=0, le=3650, description="Days a cluster event is kept")
    events_max_rows: int = Field(1_000_000, ge=1000, le=100_000_000, description="Most cluster events kept; "
                                 "the oldest go first")
    # MIG slices (issue 36, docs/mig.md): the store's records are what placement goes by; with this on, each node
    # agent also makes the instances of its pending slices with `nvidia-smi mig` and reports their UUIDs.
    mig_apply: bool = Field(False, description="Node agents make the MIG instances of their pending slices "
                            "(`nvidia-smi mig -cgi PROFILE -C`); off: an administrator makes them and records "
                            "each UUID (`berth node mig create … --uuid`)")

    @classmethod
    def load(cls, state_dir: Path) -> ClusterSettings:
        data: dict[str, object] = {}
        path = state_dir / "cluster.json"
        if path.exists():
            data.update(json.loads(path.read_text()))
        for name in cls.model_fields:
            env = os.environ.get(f"BERTH_{name.upper()}")
            if env is not None:
                data[name] = env
        return cls.model_validate(data)

    def save(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / "cluster.json").write_text(self.model_dump_json(indent=2))

    def weights_endpoint(self) -> str:
        """Where a node downloads weights from: HF_ENDPOINT (huggingface_hub's own variable) where the node agent
        has it, else the cluster's mirror, else the Hub. Both download paths (a catalog start's weights and a
        model job) ask here."""
        return os.environ.get("HF_ENDPOINT") or self.hf_endpoint or HF_HUB_ENDPOINT


@dataclass(frozen=True)
class StateLayout:
    """Paths inside a state dir; one place so every component agrees."""

    root: Path

    @property
    def temporal_db(self) -> Path:
        return self.root / "temporal" / "temporal.db"

    @property
    def store_db(self) -> Path:
        return self.root / "berth.db"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def data(self) -> Path:
        """Volumes and the model cache: the state dir, or BERTH_DATA_DIR (a Slurm site's shared filesystem)."""
        return data_dir_setting() or self.root  # imported at the end of this module

    @property
    def volumes(self) -> Path:
        return self.data / "volumes"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"

    @property
    def stack_file(self) -> Path:
        return self.root / "stack.json"

    @property
    def lock_file(self) -> Path:
        return self.root / "stack.lock"

    @property
    def client_config(self) -> Path:
        return self.root / "client.json"

    def workflow_logs(self, workflow_id: str) -> Path:
        return self.logs / "workflows" / workflow_id

    @property
    def models(self) -> Path:
        """The managed model cache: sha256/<digest>/ (materialized), partial/ (resumable downloads),
        manifests/<digest>.txt, locks/."""
        return self.data / "models"

    def ephemeral_volume(self, workflow_id: str) -> Path:
        return self.volumes / "ephemeral" / workflow_id

    def persistent_volume(self, name: str) -> Path:
        return self.volumes / "persistent" / name


class ClientConfig(BaseModel):
    """What the CLI needs: the API URL and a token. File < `BERTH_API_URL`/`BERTH_TOKEN` env (read by
    berth/client_config.py, which the CLI's pydantic-free fast path reads too)."""

    api_url: str = DEFAULT_API_URL
    token: str | None = None
    ca_file: str | None = None  # a private CA to trust for an https API (`berth ca-cert`); BERTH_TLS_CA overrides

    @staticmethod
    def path() -> Path:
        return client_config_path()

    @classmethod
    def load(cls) -> ClientConfig:
        return cls.model_validate(client_config_values())

    def save(self, path: Path | None = None) -> Path:
        path = path or self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        # The token is a credential: owner-only from the moment the file exists.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.model_dump_json(indent=2))
        return path


@dataclass(frozen=True)
class TemporalTLS:
    """TLS (mutual, with a client certificate) to Temporal in the multi-host shape, from
    `BERTH_TEMPORAL_TLS_CERT`/`_KEY` (this component's PEM certificate and key), `_CA` (the CA that signed
    the server's certificate) and `_SERVER_NAME` (the name in it, when it is not the dialled host)."""

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    server_name: str | None = None

    @classmethod
    def from_env(cls) -> TemporalTLS | None:
        """None when no variable is set: plain gRPC, as the embedded stack uses on loopback."""
        paths = {name: os.environ.get(f"BERTH_TEMPORAL_TLS_{name.upper()}") or None for name in ("cert", "key", "ca")}
        server_name = os.environ.get("BERTH_TEMPORAL_TLS_SERVER_NAME") or None
        if not any(paths.values()) and server_name is None:
            return None
        if bool(paths["cert"]) != bool(paths["key"]):
            raise UserInputError("Set both BERTH_TEMPORAL_TLS_CERT and BERTH_TEMPORAL_TLS_KEY (a client certificate "
                             "needs its key), or neither.")
        return cls(**{name: Path(value) if value else None for name, value in paths.items()},
                   server_name=server_name)


class UvicornTLS(TypedDict, total=False):
    """uvicorn's keyword arguments for an HTTPS listener (uvicorn.run, uvicorn.Config); none for plain HTTP."""

    ssl_certfile: str
    ssl_keyfile: str


@dataclass(frozen=True)
class ServerTLS:
    """The certificate and key an HTTPS listener (the API, the endpoint proxy) serves with, from
    `BERTH_TLS_CERT`/`BERTH_TLS_KEY`; `berth up --tls` sets them for those two components only."""

    cert: Path
    key: Path

    @classmethod
    def from_env(cls) -> ServerTLS | None:
        """None when neither is set: plain HTTP."""
        cert, key = os.environ.get("BERTH_TLS_CERT") or None, os.environ.get("BERTH_TLS_KEY") or None
        if cert is None and key is None:
            return None
        if cert is None or key is None:
            raise UserInputError("Set both BERTH_TLS_CERT and BERTH_TLS_KEY (a server certificate needs its key), "
                                 "or neither.")
        return cls(cert=Path(cert), key=Path(key))

    def uvicorn_options(self) -> UvicornTLS:
        return {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}


# The components' variables live in berth/settings/components.py (this module would pass 400 lines).
from berth.settings.components import (  # noqa: E402, F401 — re-exported: berth.settings is the one import
    DEFAULT_TEMPORAL_ADDRESS,
    REQUEST_TIMEOUT_RANGE_S,
    LiteLLMHookSettings,
    ProxyHolding,
    ProxyLimits,
    admin_user,
    component_api_url,
    component_state_dir,
    component_token,
    data_dir_setting,
    database_url,
    gateway_master_key,
    key_hmac_secret_file,
    litellm_assertion_settings,
    litellm_bin_override,
    litellm_hook_settings,
    litellm_standby_mode,
    log_format,
    metrics_enabled,
    opencode_bin_override,
    otel_endpoint,
    rank_user_setting,
    replica_keys_token,
    state_dir_if_set,
    temporal_address,
    temporal_dynamic_config,
    vllm_bin_override,
)
from berth.settings.limits import (  # noqa: E402, F401 — re-exported: berth.settings is the one import
    limit_policy,
    limits_file,
    read_limit_policy,
    redis_url,
)
from berth.settings.slurm import SlurmSettings  # noqa: E402, F401 — re-exported: berth.settings is the one import
