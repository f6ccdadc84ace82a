"""What a component process is given: the BERTH_* variables `berth up` sets for each component (`berth
server`, `worker`, `node`, `proxy`, `gateway`, `hf-mirror`) and those a node agent sets for the processes
it runs (a pool's LiteLLM hooks). Part of berth.settings, which re-exports every name: import from there."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from berth.errors import UserInputError

# --- What a component process is given -------------------------------------------------------------
# `berth up` starts each component (`berth server`, `worker`, `node`, `proxy`, `gateway`, `hf-mirror`)
# with these set; a multi-host operator sets them by hand (docs/operations.md).
DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"


def _component_variable(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise UserInputError(f"{name} is not set. `berth up` sets it; for a multi-host setup see docs/operations.md.")
    return value


def component_state_dir() -> Path:
    """`BERTH_STATE_DIR`, required: the state dir a component works in."""
    return Path(_component_variable("BERTH_STATE_DIR"))


def component_api_url() -> str:
    """`BERTH_API_URL`, required: the control plane a component calls."""
    return _component_variable("BERTH_API_URL")


def component_token() -> str:
    """`BERTH_TOKEN`, required: the API token a component calls the control plane with."""
    return _component_variable("BERTH_TOKEN")


def temporal_address() -> str:
    """`BERTH_TEMPORAL_ADDRESS`: the Temporal frontend (host:port) a component connects to."""
    return _component_variable("BERTH_TEMPORAL_ADDRESS", DEFAULT_TEMPORAL_ADDRESS)


def database_url() -> str | None:
    """`BERTH_DATABASE_URL`: the control-plane store (SQLAlchemy URL); None: SQLite in the state dir."""
    return os.environ.get("BERTH_DATABASE_URL")


def gateway_master_key() -> str | None:
    """`BERTH_GATEWAY_MASTER_KEY`: the key a model gateway's callers must send (its entry's MasterKeySecret)."""
    return os.environ.get("BERTH_GATEWAY_MASTER_KEY") or None


def key_hmac_secret_file() -> Path | None:
    """`BERTH_KEY_HMAC_SECRET_FILE`: the file holding the secret API keys are stored under (HMAC-SHA256);
    None: the control plane generates one in the state dir's keys at first start."""
    value = os.environ.get("BERTH_KEY_HMAC_SECRET_FILE")
    return Path(value) if value else None


def replica_keys_token() -> str | None:
    """`BERTH_REPLICA_KEYS_TOKEN`: the token a model gateway reads its copies' keys with."""
    return os.environ.get("BERTH_REPLICA_KEYS_TOKEN")


@dataclass(frozen=True)
class ProxyHolding:
    """How long the endpoint proxy holds a request for a pool with no routable copy, and how many may wait
    per endpoint; how long for a Proxy=true pool whose LiteLLM is being restarted (None: the proxy's own
    defaults)."""

    timeout_s: float | None
    max_held: int | None
    front_hold_s: float | None = None

    @classmethod
    def from_env(cls) -> ProxyHolding:
        timeout, most = os.environ.get("BERTH_PROXY_HOLD_TIMEOUT_S"), os.environ.get("BERTH_PROXY_MAX_HELD")
        front = os.environ.get("BERTH_PROXY_FRONT_HOLD_S")
        try:
            return cls(timeout_s=float(timeout) if timeout else None, max_held=int(most) if most else None,
                       front_hold_s=float(front) if front else None)
        except ValueError:
            raise SystemExit("BERTH_PROXY_HOLD_TIMEOUT_S and BERTH_PROXY_FRONT_HOLD_S must be numbers of seconds "
                             "and BERTH_PROXY_MAX_HELD a whole number") from None


# What a client may ask with `x-request-timeout` (seconds): anything outside is refused with a 400.
REQUEST_TIMEOUT_RANGE_S = (1.0, 300.0)


@dataclass(frozen=True)
class ProxyLimits:
    """What both proxies (the endpoint proxy and the model gateway) allow one request: the body's size
    (the LimitPolicy's `body_limit_bytes`, BERTH_LIMITS_FILE: one body limit, set in one place; the endpoint
    proxy applies each endpoint's override per request), the whole upstream exchange, connect to last byte
    (`BERTH_UPSTREAM_DEADLINE_S`; a client may ask for 1-300 s with `x-request-timeout`), and the longest
    silence between two chunks of a streamed answer (`BERTH_STREAM_IDLE_S`)."""

    body_limit_bytes: int = 1024 * 1024
    # LiteLLM's own default: a long generation (an agent's turn on a CPU engine) is no hang; stream_idle_s
    # catches those.
    upstream_deadline_s: float = 600.0
    stream_idle_s: float = 60.0

    def __post_init__(self) -> None:
        if self.body_limit_bytes < 1 or not self.upstream_deadline_s > 0 or not self.stream_idle_s > 0:
            raise UserInputError("body_limit_bytes, BERTH_UPSTREAM_DEADLINE_S and BERTH_STREAM_IDLE_S must be "
                                 "positive")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, body_limit_bytes: int | None = None) -> ProxyLimits:
        """The defaults, each clock replaced by its variable when set; `body_limit_bytes`: the LimitPolicy's."""
        deadline, idle = (environ.get(name, "").strip() for name in ("BERTH_UPSTREAM_DEADLINE_S",
                                                                      "BERTH_STREAM_IDLE_S"))
        defaults = cls()
        try:
            values = (body_limit_bytes or defaults.body_limit_bytes,
                      float(deadline) if deadline else defaults.upstream_deadline_s,
                      float(idle) if idle else defaults.stream_idle_s)
        except ValueError:
            raise UserInputError("BERTH_UPSTREAM_DEADLINE_S and BERTH_STREAM_IDLE_S must be numbers of "
                                 "seconds") from None
        return cls(*values)


def state_dir_if_set() -> Path | None:
    """BERTH_STATE_DIR when set (a proxy host may have none: then it signs no caller assertions)."""
    value = os.environ.get("BERTH_STATE_DIR")
    return Path(value) if value else None


def vllm_bin_override() -> str | None:
    """BERTH_VLLM_BIN: the `vllm` executable a node agent runs instead of its engine's default."""
    return os.environ.get("BERTH_VLLM_BIN") or None


def admin_user() -> str:
    """BERTH_ADMIN_USER: the administrator the control plane creates and `berth up` signs its token for."""
    return os.environ.get("BERTH_ADMIN_USER", "admin")


def litellm_bin_override() -> str | None:
    """BERTH_LITELLM_BIN: the `litellm` executable a node agent runs instead of the checkout's .venv-litellm."""
    return os.environ.get("BERTH_LITELLM_BIN", "").strip() or None


def data_dir_setting(environ: Mapping[str, str] = os.environ) -> Path | None:
    """BERTH_DATA_DIR: where a node keeps volumes and the model cache instead of its state dir. On a Slurm site,
    the shared filesystem: every job reads the weights at the same path, while the state dir, with its keys,
    stays on a disk no job reads (docs/slurm.md). Absolute; unset: the state dir."""
    value = environ.get("BERTH_DATA_DIR", "").strip()
    if not value:
        return None
    if not value.startswith("/"):
        raise UserInputError(f"BERTH_DATA_DIR={value} is not an absolute path: name the directory from /.")
    return Path(value)


def rank_user_setting(environ: Mapping[str, str] = os.environ) -> str:
    """BERTH_RANK_USER: the user a root node agent starts ranks as, in their own mount namespace
    (activities/rank_jail.py; created when missing); `berth-rank` by default, `none` runs them as the agent."""
    return environ.get("BERTH_RANK_USER", "berth-rank").strip()


def litellm_standby_mode(environ: Mapping[str, str] = os.environ) -> Literal["on", "lazy", "off"]:
    """BERTH_LITELLM_STANDBY: when each node agent spawns its LiteLLM standby, the interpreter that imports LiteLLM
    once and forks every LiteLLM start and restart of that agent (activities/litellm_standby.py). `on` (the
    default): when the agent starts. `lazy`: at its first LiteLLM start, which then waits for the imports (a node
    that never fronts a pool holds no spare). `off`: never; every LiteLLM starts cold. Any other value stops the
    agent in one line."""
    value = environ.get("BERTH_LITELLM_STANDBY", "on").strip().lower()
    if value == "on":
        return "on"
    if value == "lazy":
        return "lazy"
    if value == "off":
        return "off"
    raise SystemExit(f"BERTH_LITELLM_STANDBY must be on, lazy or off, not {value[:20]!r}.")


# Temporal's dynamic-config keys are dotted identifiers; a value is a JSON value: here a number or a boolean, the
# limits and switches an operator tunes (a string would need quotes, a duration a unit).
TEMPORAL_DYNAMIC_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}(?:\.[A-Za-z][A-Za-z0-9_]{0,63}){0,7}$")
TEMPORAL_DYNAMIC_VALUE = re.compile(r"^(?:-?[0-9]{1,18}(?:\.[0-9]{1,9})?|true|false)$")


def temporal_dynamic_config(environ: Mapping[str, str] = os.environ) -> list[str]:
    """BERTH_TEMPORAL_DYNAMIC_CONFIG: `KEY=VALUE` pairs, space-separated, for the embedded Temporal dev server's
    `--dynamic-config-value` (e.g. `limit.historyCount.suggestContinueAsNew=2000` to have workflows continue as
    new sooner). Each pair becomes one argument of the server's command line, so anything else is refused in
    one line."""
    pairs = environ.get("BERTH_TEMPORAL_DYNAMIC_CONFIG", "").split()
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not TEMPORAL_DYNAMIC_KEY.match(key) or not TEMPORAL_DYNAMIC_VALUE.match(value):
            raise UserInputError(f"BERTH_TEMPORAL_DYNAMIC_CONFIG: {pair[:80]!r} is not KEY=VALUE (a dotted key, a "
                                 "number or true/false), e.g. "
                                 "limit.historyCount.suggestContinueAsNew=2000.")
    return pairs


def opencode_bin_override() -> str | None:
    """BERTH_OPENCODE_BIN: the `opencode` executable to run instead of the one `make opencode` installed."""
    return os.environ.get("BERTH_OPENCODE_BIN") or None


def litellm_assertion_settings() -> tuple[str, str]:
    """Inside an endpoint's LiteLLM: where the caller-assertion keys are published (BERTH_JWKS_URL) and the
    endpoint an assertion must be for (BERTH_ENDPOINT_ID); empty strings when assertions are off."""
    return os.environ.get("BERTH_JWKS_URL", "").strip(), os.environ.get("BERTH_ENDPOINT_ID", "").strip()


@dataclass(frozen=True)
class LiteLLMHookSettings:
    """Inside a pool's LiteLLM proxy: what Berth's sync hook reads from the environment its node agent gave
    it (activities/litellm_service.py writes these variables; nothing else sets them)."""

    model_name: str
    served_model_name: str
    replicas_url: str
    interval_s: float
    rate_url: str
    replicas_token: str  # reads this endpoint's copy list and nothing else; never logged
    tls_ca: str  # the control plane's private CA file, "" for the system store only


def litellm_hook_settings(environ: Mapping[str, str] = os.environ) -> LiteLLMHookSettings:
    """BERTH_MODEL_NAME, BERTH_SERVED_MODEL_NAME, BERTH_REPLICAS_URL, BERTH_SYNC_INTERVAL_S, BERTH_RATE_URL,
    BERTH_REPLICAS_TOKEN and BERTH_TLS_CA. Raises ValueError — which fails LiteLLM's start-up: better than
    a proxy that never gains a copy — when the model or the copy list's URL is missing."""
    model_name = environ.get("BERTH_MODEL_NAME", "").strip()
    replicas_url = environ.get("BERTH_REPLICAS_URL", "").strip()
    if not model_name or not replicas_url:
        raise ValueError("gateway.litellm_hooks.replica_sync needs BERTH_MODEL_NAME and BERTH_REPLICAS_URL")
    interval_s = float(environ.get("BERTH_SYNC_INTERVAL_S", "1.0"))
    if interval_s <= 0:
        raise ValueError("BERTH_SYNC_INTERVAL_S must be positive")
    return LiteLLMHookSettings(
        model_name=model_name, served_model_name=environ.get("BERTH_SERVED_MODEL_NAME", "").strip() or model_name,
        replicas_url=replicas_url, interval_s=interval_s, rate_url=environ.get("BERTH_RATE_URL", "").strip(),
        replicas_token=environ.get("BERTH_REPLICAS_TOKEN", "").strip(), tls_ca=environ.get("BERTH_TLS_CA", "").strip())



def metrics_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """`BERTH_METRICS`: `off` stops a proxy recording its Prometheus figures (its /metrics then answers 404);
    on by default. Any other value than on/off stops the start in one line."""
    value = environ.get("BERTH_METRICS", "on").strip().lower()
    if value not in ("on", "off"):
        raise SystemExit(f"BERTH_METRICS must be on or off, not {value[:20]!r}.")
    return value == "on"


def otel_endpoint(environ: Mapping[str, str] = os.environ) -> str | None:
    """`BERTH_OTEL_ENDPOINT`: an OTLP/HTTP collector's base URL (spans go to `<it>/v1/traces`); unset: no
    tracing at all (berth/telemetry.py). A URL with a user or password in it is refused: the URL is logged when
    an export fails, and a collector's credentials belong in OTEL_EXPORTER_OTLP_HEADERS (read by the SDK)."""
    value = environ.get("BERTH_OTEL_ENDPOINT", "").strip().rstrip("/")
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise SystemExit("BERTH_OTEL_ENDPOINT must be a collector's http(s) base URL, e.g. http://127.0.0.1:4318.")
    if parts.username is not None or parts.password is not None:
        raise SystemExit("BERTH_OTEL_ENDPOINT must not carry credentials; put them in OTEL_EXPORTER_OTLP_HEADERS.")
    return value


def log_format(environ: Mapping[str, str] = os.environ) -> str:
    """`BERTH_LOG_FORMAT`: `json` for one JSON object per line, `text` (the default) for plain lines."""
    value = environ.get("BERTH_LOG_FORMAT", "text").strip().lower() or "text"
    if value not in ("text", "json"):
        raise SystemExit(f"BERTH_LOG_FORMAT must be text or json, not {value[:20]!r}.")
    return value
