"""LiteLLM service: render the per-model LiteLLM proxy's config, environment and command, and run it."""

# Berth runs the stock `litellm` proxy server, one per model, with no database, in front of the
# model's pool of vLLM replicas. Hook modules of gateway/litellm_hooks/ run inside it (so they may
# import only what LiteLLM's own virtualenv has: pyproject's `litellm-hooks-venv` contract):
#   gateway.litellm_hooks.replica_sync  worker start-up hook: router deployments follow the pool; request counters
#   gateway.litellm_hooks.auth          custom_auth: caller assertion or LiteLLM key
# This module runs in Berth's own environment and never imports litellm.

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from berth.child_environment import BASE_VARIABLES, inherit
from berth.settings import litellm_bin_override, tls_ca_file

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
LITELLM_EXECUTABLE_ENV: Final = "BERTH_LITELLM_BIN"
CONFIG_FILE_NAME: Final = "litellm_config.yaml"
LIVENESS_PATH: Final = "/health/liveliness"  # sic: LiteLLM's spelling; 200 once start-up completed
SYNC_HOOK: Final = "gateway.litellm_hooks.replica_sync:start"
CUSTOM_AUTH: Final = "gateway.litellm_hooks.auth.user_api_key_auth"
# The only variables of the caller's environment LiteLLM inherits. LiteLLM reads dozens of others
# (DATABASE_URL, REDIS_HOST, OPENAI_API_KEY, ...) that would silently change its behaviour, and the
# node agent's own secrets have no business in it.
INHERITED_VARIABLES: Final = BASE_VARIABLES


class LiteLLMStartError(RuntimeError):
    """The LiteLLM process exited or did not become live in time."""


class LiteLLMServiceSpec(BaseModel):
    """Everything that decides how one model's LiteLLM proxy runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_name: str = Field(
        min_length=1, description="id clients use and /v1/models lists: openai/gpt-oss-20b"
    )
    served_model_name: str = Field(default="", description="name the replicas serve; empty = model_name")
    master_key: SecretStr
    replicas_url: str = Field(description="GET -> {'copies': [{'copy_id', 'url', 'ready'}]}")
    replicas_token: SecretStr = Field(default=SecretStr(""), description="bearer token for replicas_url")
    endpoint_id: str = Field(default="", description="audience of caller assertions; empty = assertions off")
    jwks_url: str = Field(default="", description="published caller-assertion keys; empty = publication off")
    rate_url: str = Field(default="", description="optional: request counters are POSTed here every interval")
    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    num_workers: int = Field(default=1, ge=1)
    request_timeout_s: float = Field(default=600.0, gt=0)
    sync_interval_s: float = Field(default=1.0, gt=0)

    @field_validator("master_key")
    @classmethod
    def _master_key_is_not_blank(cls, value: SecretStr) -> SecretStr:
        secret: Final = value.get_secret_value()
        # LiteLLM refuses to start on a blank key; say so before a process is spawned.
        if not secret.strip() or secret != secret.strip():
            raise ValueError("master_key must be non-blank, without surrounding whitespace")
        return value

    @field_validator("replicas_url", "jwks_url", "rate_url")
    @classmethod
    def _is_http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        return value

    @field_validator("replicas_url")
    @classmethod
    def _replicas_url_is_set(cls, value: str) -> str:
        if not value:
            raise ValueError("replicas_url is required: it is how LiteLLM learns the pool's replicas")
        return value

    @property
    def base_url(self) -> str:
        """Where a client on this host reaches the proxy."""
        host: Final = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"


def render_config(spec: LiteLLMServiceSpec) -> dict[str, Any]:
    """The LiteLLM config file's content (no secret in it: the master key comes from the environment)."""
    return {
        # Deployments arrive at run time from gateway.litellm_hooks.replica_sync; without a database nothing else
        # could add them (/model/new needs one).
        "model_list": [],
        "general_settings": {
            # LiteLLM resolves `os.environ/NAME` itself (and its boot check recommends exactly this), so
            # the key lives only in the process environment, never in a file or on the command line.
            "master_key": "os.environ/LITELLM_MASTER_KEY",
            "custom_auth": CUSTOM_AUTH,
            # `auto`: a plain exception from the hook falls back to LiteLLM's key check.
            "custom_auth_settings": {"mode": "auto"},
        },
        "litellm_settings": {
            "drop_params": True,
            # Retries hide a dead replica behind latency; the pool replaces replicas, the client retries.
            "num_retries": 0,
            "request_timeout": spec.request_timeout_s,
            # Prompts and completions stay out of LiteLLM's logging callbacks and out of its own log (tool-call
            # arguments it cannot parse are logged): kept, though its copies cost ~0.7 ms of CPU a request.
            "turn_off_message_logging": True,
            "disable_hf_tokenizer_download": True,
            # LiteLLM's default aiohttp transport, kept: httpx's cost about 3 ms more CPU per request in
            # 1.108.7 (bench/litellm_overhead.py). The sessions it leaked came from /v1/completions building a
            # client per call, which gateway.litellm_hooks.request_path replaces with one shared client; the
            # segfaults that followed such leaks were CPython's collector (gateway.litellm_hooks.gc_pacing).
        },
        "router_settings": {
            "num_retries": 0,
            "timeout": spec.request_timeout_s,
            # The replica list is the one source of truth for which replica takes traffic; LiteLLM's
            # own cooldown would take the only replica out for a client's 4xx burst.
            "disable_cooldowns": True,
        },
    }


def render_config_yaml(spec: LiteLLMServiceSpec) -> str:
    rendered: str = yaml.safe_dump(render_config(spec), sort_keys=False)
    return rendered


# What every LiteLLM of this node agent shares: a standby (gateway/litellm_hooks/standby.py) imports LiteLLM
# under exactly these, so nothing LiteLLM reads at import time differs from a cold start's.
def shared_environment(inherited: Mapping[str, str] | None = None, repo_root: Path = REPO_ROOT) -> dict[str, str]:
    """The LiteLLM environment with no endpoint's values in it (and no secret)."""
    source: Final = os.environ if inherited is None else inherited
    environment: Final = inherit(source, INHERITED_VARIABLES)
    environment.update(
        {
            # No call home at start-up: the cost map, and the other bundled-or-fetched catalogues.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
            "LITELLM_LOCAL_BLOG_POSTS": "True",
            "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
            "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
            "LITELLM_TELEMETRY_DISABLED": "True",
            # DEV mode (the default) loads a `.env` from the working directory.
            "LITELLM_MODE": "PRODUCTION",
            # Berth has no use for the admin UI or the API docs; fewer routes, less to guard.
            "DISABLE_ADMIN_UI": "True",
            "NO_DOCS": "True",
            "NO_REDOC": "True",
            "LITELLM_WORKER_STARTUP_HOOKS": SYNC_HOOK,
            # The control plane's private CA (a file path, no secret): the hooks call its https URLs.
            "BERTH_TLS_CA": tls_ca_file(source) or "",
            # The hook modules import as `gateway.*` from the repository root.
            "PYTHONPATH": str(repo_root),
            "PYTHONUNBUFFERED": "1",
            # A crash in a C extension then leaves every thread's Python stack in the log.
            "PYTHONFAULTHANDLER": "1",
        }
    )
    return environment


def render_environment(
    spec: LiteLLMServiceSpec,
    inherited: Mapping[str, str] | None = None,
    repo_root: Path = REPO_ROOT,
) -> dict[str, str]:
    """The LiteLLM process's complete environment (it holds the master key: never log it)."""
    environment: Final = shared_environment(inherited, repo_root)
    environment.update(
        {
            "LITELLM_MASTER_KEY": spec.master_key.get_secret_value(),
            "BERTH_MODEL_NAME": spec.model_name,
            "BERTH_SERVED_MODEL_NAME": spec.served_model_name or spec.model_name,
            "BERTH_REPLICAS_URL": spec.replicas_url,
            "BERTH_SYNC_INTERVAL_S": str(spec.sync_interval_s),
            "BERTH_JWKS_URL": spec.jwks_url,
            "BERTH_ENDPOINT_ID": spec.endpoint_id,
            "BERTH_RATE_URL": spec.rate_url,
            "BERTH_REPLICAS_TOKEN": spec.replicas_token.get_secret_value(),
        }
    )
    return environment


def find_litellm_executable(repo_root: Path = REPO_ROOT) -> str:
    """BERTH_LITELLM_BIN, else the repository's .venv-litellm, else `litellm` on PATH."""
    configured: Final = litellm_bin_override()
    if configured:
        return configured
    bundled: Final = repo_root / ".venv-litellm" / "bin" / "litellm"
    if bundled.exists():
        return str(bundled)
    on_path: Final = shutil.which("litellm")
    if on_path is None:
        raise FileNotFoundError(
            f"no litellm executable: set {LITELLM_EXECUTABLE_ENV} or create .venv-litellm"
        )
    return on_path


def command_line(spec: LiteLLMServiceSpec, config_path: Path, executable: str) -> list[str]:
    return [
        executable,
        "--config",
        str(config_path),
        "--host",
        spec.host,
        "--port",
        str(spec.port),
        "--num_workers",
        str(spec.num_workers),
    ]


@dataclass(frozen=True, slots=True)
class LiteLLMLaunch:
    """A rendered LiteLLM service, ready to start: its config is already written."""

    argv: tuple[str, ...]
    config_path: Path
    working_directory: Path
    base_url: str
    environment: Mapping[str, str] = field(repr=False)  # holds the master key


def prepare_launch(
    spec: LiteLLMServiceSpec,
    working_directory: Path,
    executable: str | None = None,
    inherited: Mapping[str, str] | None = None,
) -> LiteLLMLaunch:
    """Write the config (mode 0600) into `working_directory` and return how to start LiteLLM."""
    working_directory.mkdir(parents=True, exist_ok=True)
    config_path: Final = working_directory / CONFIG_FILE_NAME
    # Created 0600 from the start, not chmod-ed after: no window in which others can read it.
    descriptor: Final = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as config_file:
        config_file.write(render_config_yaml(spec))
    os.chmod(config_path, 0o600)  # O_CREAT's mode does not apply to a file that already existed
    return LiteLLMLaunch(
        argv=tuple(command_line(spec, config_path, executable or find_litellm_executable())),
        config_path=config_path,
        working_directory=working_directory,
        base_url=spec.base_url,
        environment=render_environment(spec, inherited),
    )


class LiteLLMProcess:
    """One running LiteLLM proxy, in its own process group, its output appended to a log file."""

    def __init__(self, launch: LiteLLMLaunch, process: asyncio.subprocess.Process, log: IO[bytes]) -> None:
        self.launch: Final = launch
        self._process: Final = process
        self._log: Final = log

    @classmethod
    async def start(cls, launch: LiteLLMLaunch, log_path: Path) -> LiteLLMProcess:
        # Owned by the process object and closed in stop(); opened off the event loop.
        log: Final = await asyncio.to_thread(log_path.open, "ab")
        try:
            process: Final = await asyncio.create_subprocess_exec(
                *launch.argv,
                cwd=launch.working_directory,
                env=dict(launch.environment),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                # Its own session and process group: stop() signals LiteLLM and anything it spawned.
                start_new_session=True,
            )
        except BaseException:
            log.close()
            raise
        return cls(launch, process, log)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    async def wait_ready(self, timeout_s: float = 60.0, poll_s: float = 0.1) -> float:
        """Wait until the liveness route answers 200; return the seconds waited."""
        started: Final = time.monotonic()
        deadline: Final = started + timeout_s
        async with httpx.AsyncClient(
            base_url=self.base_url, timeout=httpx.Timeout(2.0), trust_env=False
        ) as client:
            while True:
                if self._process.returncode is not None:
                    status = self._process.returncode
                    raise LiteLLMStartError(f"litellm exited with status {status} during start-up")
                try:
                    if (await client.get(LIVENESS_PATH)).status_code == 200:
                        return time.monotonic() - started
                except httpx.TransportError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise LiteLLMStartError(f"litellm not live on {self.base_url} after {timeout_s:.0f} s")
                await asyncio.sleep(poll_s)

    async def stop(self, grace_s: float = 10.0) -> int:
        """SIGTERM the process group, SIGKILL it after `grace_s`; return the exit status."""
        try:
            if self._process.returncode is None:
                _signal_group(self._process.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(self._process.wait(), grace_s)
                except TimeoutError:
                    _signal_group(self._process.pid, signal.SIGKILL)
            # SIGKILL reached the whole group; once the leader is reaped its id may be reused, so no
            # signal goes to that group id after this wait.
            return await self._process.wait()
        finally:
            self._log.close()


def _signal_group(pid: int, signal_number: signal.Signals) -> None:
    try:
        os.killpg(pid, signal_number)
    except ProcessLookupError:
        pass  # the whole group has already exited
