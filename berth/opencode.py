"""OpenCode: its provider block for Berth endpoints, `opencode serve` rendering, the endpoint pre-flight."""

from __future__ import annotations

import base64
import json
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from berth.contracts import ServedModel
from berth.errors import UserInputError
from berth.processes import plain_directory
from berth.settings import opencode_bin_override, repo_root, tls_ca_file
from berth.tls_client import client_context

# What `make opencode` installs (mk/opencode.mk); the entry's default image carries the same binary.
OPENCODE_VERSION = "1.18.33"
# The user name `opencode serve` expects in HTTP Basic credentials (OPENCODE_SERVER_USERNAME's default).
SERVER_USERNAME = "opencode"
WORKSPACE_DIR = "/data/workspace"
DEFAULT_PROVIDER = "berth"
TOKEN_ENV = "BERTH_TOKEN"
LITELLM_KEY_ENV = "LITELLM_KEY"
# Read from OpenCode 1.18's bundled code: without these it fetches https://models.dev/api.json at start
# and every hour (10 s timeout), and looks up its latest release to update itself.
OFFLINE_ENV: Mapping[str, str] = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
}
# The same, as config keys: they also hold where the environment is not ours (a workstation).
OFFLINE_CONFIG: Mapping[str, Any] = {"autoupdate": False, "share": "disabled"}


def opencode_binary() -> Path:
    """The `opencode` executable: BERTH_OPENCODE_BIN, else what `make opencode` installed, else PATH."""
    override = opencode_bin_override()
    if override:
        return Path(override)
    installed = repo_root() / ".tools" / "opencode" / "node_modules" / ".bin" / "opencode"
    if installed.exists():
        return installed
    found = shutil.which("opencode")
    if found:
        return Path(found)
    raise UserInputError("OpenCode is not installed: run `make opencode` or set BERTH_OPENCODE_BIN.")


def default_output_limit(context: int) -> int:
    """A quarter of the context, at most 8192 (the document's 32768 → 8192), so a prompt keeps room."""
    return max(1, min(8192, context // 4))


def pick_default_model(contexts: Sequence[tuple[str, int]]) -> str:
    """OpenCode's default model among (name, context) pairs: the largest context, the first listed among
    equals. OpenCode's first prompt (its system prompt and tool definitions) must fit beside the reply: a
    gateway that also serves SmolLM2 (8,192 tokens) made it the default, and that prompt failed (issue 31)."""
    if not contexts:
        raise UserInputError("No model to make OpenCode's default: the endpoint(s) list none.")
    return max(contexts, key=lambda pair: pair[1])[0]  # max keeps the first of equals


@dataclass(frozen=True)
class ProviderTarget:
    """One OpenAI-compatible base (a Berth endpoint or an outside API) and the models it lists, each with
    its context: its own in `contexts` (a gateway's models, each from its pool), else `max_context`."""

    url: str  # without /v1
    model_ids: tuple[str, ...]
    max_context: int
    output_limit: int | None = None
    api_key: str = "{env:" + TOKEN_ENV + "}"
    headers: Mapping[str, str] = field(default_factory=dict)
    label: str = "Berth"
    contexts: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.model_ids:
            raise UserInputError(f"{self.url} lists no model yet: retry once /v1/models lists one.")
        for model in self.model_ids:
            limit = self.limit(model)
            if limit["output"] >= limit["context"]:
                whose = f" of {model}" if len(self.model_ids) > 1 else ""
                raise UserInputError(f"The output limit ({limit['output']}) must be below the context{whose} "
                                     f"({limit['context']}).")

    def context(self, model: str) -> int:
        return self.contexts.get(model, self.max_context)

    def limit(self, model: str) -> dict[str, int]:
        """OpenCode's `limit` for one model: its context, and the reply's share of it."""
        context = self.context(model)
        return {"context": context, "output": self.output_limit or default_output_limit(context)}

    def block(self) -> dict[str, Any]:
        """The `provider.<key>` object of opencode.json (seeds/001 "Configure OpenCode")."""
        options: dict[str, Any] = {"baseURL": self.url.rstrip("/") + "/v1", "apiKey": self.api_key}
        if self.headers:
            options["headers"] = dict(self.headers)
        return {
            "npm": "@ai-sdk/openai-compatible",
            "name": self.label,
            "options": options,
            "models": {model: {"name": f"{model} on {self.label}", "limit": self.limit(model)}
                       for model in self.model_ids},
        }


def served_target(url: str, listed: Sequence[str] | None, served: Sequence[ServedModel],
                  fallback_context: int | None = None, **more: Any) -> ProviderTarget:
    """A provider for an endpoint whose models' contexts the API gave (`served`: one for a model endpoint,
    one per discovered pool's model for a gateway). `listed`: what its /v1/models answered (None: not
    asked, so `served`'s). A listed model `served` lacks (a pool discovered in between) gets the smallest
    context known, else `fallback_context`: too small a context costs a longer prompt, too large a refusal."""
    contexts = {model.model_id: model.max_context for model in served}
    fallback = min(contexts.values(), default=fallback_context)
    if fallback is None:
        raise UserInputError(f"{url} reports no model's context: retry once it serves one.")
    model_ids = tuple(listed) if listed is not None else tuple(contexts)
    return ProviderTarget(url=url, model_ids=model_ids, max_context=fallback, contexts=contexts, **more)


def opencode_config(targets: Mapping[str, ProviderTarget], default_model: str | None = None,
                    offline: bool = False) -> dict[str, Any]:
    """A whole opencode.json: one provider per key, `model` = `<provider key>/<model id>` exactly: the
    `default_model` named, else pick_default_model's (the largest context)."""
    if not targets:
        raise UserInputError("No model endpoint to configure OpenCode with.")
    config: dict[str, Any] = {"$schema": "https://opencode.ai/config.json"}
    if offline:
        config.update(OFFLINE_CONFIG)
    config["provider"] = {key: target.block() for key, target in targets.items()}
    known = [(f"{key}/{model}", target.context(model)) for key, target in targets.items()
             for model in target.model_ids]
    if default_model is None:
        config["model"] = pick_default_model(known)
    else:
        chosen = [name for name, _ in known if name == default_model or name.split("/", 1)[1] == default_model]
        if not chosen:
            raise UserInputError(f"Model={default_model} is not listed by the endpoint(s); they list "
                                 f"{', '.join(n.split('/', 1)[1] for n, _ in known)}. Use exactly an id from "
                                 "/v1/models.")
        config["model"] = chosen[0]
    return config


# --- `opencode serve` ------------------------------------------------------------------------------
def generate_password() -> str:
    """A server password that never starts with "-": `opencode attach URL -p PASSWORD` (the command the
    show-server log prints) would read it as an option and print its usage — 1 password in 64 did."""
    while True:
        password = secrets.token_urlsafe(24)
        if not password.startswith("-"):
            return password


def basic_credentials(password: str, username: str = SERVER_USERNAME) -> str:
    """The Authorization header value `opencode serve` accepts: Basic BASE64(opencode:PASSWORD)."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


@dataclass(frozen=True)
class ServeCommand:
    """Everything a service runner needs to start `opencode serve`: argv, environment and directories."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path  # the workspace
    config_path: Path
    url: str
    home: Path  # HOME and the XDG dirs: sessions, logs, snapshots

    @property
    def config_dir(self) -> Path:
        """OpenCode's global config dir ($XDG_CONFIG_HOME/opencode), which it must not be able to write."""
        return self.home / ".config" / "opencode"


def render_serve(config: Mapping[str, Any], password: str, *, host: str, port: int, data_dir: Path,
                 token: str | None = None, litellm_key: str | None = None,
                 binary: Path | None = None, workspace: Path | None = None,
                 more_tokens: Mapping[str, str] | None = None) -> ServeCommand:
    """Write opencode.json under `data_dir` and render `opencode serve` with HOME and XDG dirs there, so
    sessions live on the workflow's volume and nothing is read from or written to the node's user.
    `token` (the workflow's minted Berth token) and `litellm_key` travel as environment variables the
    config names with {env:…}; neither is written to disk. `more_tokens` (env var → token) carries the
    tokens of further providers: an endpoint token is bound to one endpoint."""
    workspace = workspace or data_dir / "workspace"
    home = data_dir / "home"
    for directory in (workspace, home):
        directory.mkdir(parents=True, exist_ok=True)
    config_path = data_dir / "opencode.json"
    # Readable by the service (run as the rank user when the agent is root: activities/front_jail.py), writable
    # by none: it holds no secret (the tokens and the key are {env:…} references). Replaced, not rewritten: its
    # owner may not write a 0444 file either.
    config_path.unlink(missing_ok=True)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    config_path.chmod(0o444)
    config_dir = plain_directory(home, home / ".config" / "opencode")  # home may be a jailed service's
    # Not writable by OpenCode: after its first session it forks an `npm install @opencode-ai/plugin` into every
    # config dir it may write (OpenCode 1.18's Npm.install returns early on one it may not). Offline that install
    # hangs, and while it runs OpenCode ignores SIGTERM: each stop waited the supervisor's grace and ended in
    # SIGKILL. A jailed service gets it back as the agent's, 0755 (activities/front_jail.py).
    config_dir.chmod(0o555)
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "OPENCODE_CONFIG": str(config_path),
        "OPENCODE_SERVER_USERNAME": SERVER_USERNAME,
        "OPENCODE_SERVER_PASSWORD": password,
        **OFFLINE_ENV,
    }
    if token:
        env[TOKEN_ENV] = token
    env.update(more_tokens or {})
    if litellm_key:
        env[LITELLM_KEY_ENV] = litellm_key
    argv = (str(binary or opencode_binary()), "serve", "--hostname", host, "--port", str(port))
    return ServeCommand(argv=argv, env=env, cwd=workspace, config_path=config_path, url=f"http://{host}:{port}",
                        home=home)


# --- pre-flight: can the workflow reach its Endpoint? -------------------------------------------------
class EndpointUnreachableError(UserInputError):
    """The Endpoint the OpenCode workflow was given cannot serve it; the message says which and why."""


async def preflight(url: str, token: str | None = None, litellm_key: str | None = None,
                    transport: httpx.AsyncBaseTransport | None = None,
                    timeout_s: float = 10.0, ca_file: str | None = None) -> tuple[str, ...]:
    """GET <url>/v1/models as the workflow will; return the model ids it lists, or raise saying why not.
    An https endpoint proxy with a private CA: `ca_file`, else BERTH_TLS_CA, is trusted besides the system's."""
    headers: dict[str, str] = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if litellm_key:
        headers["x-litellm-api-key"] = litellm_key
    models_url = url.rstrip("/") + "/v1/models"
    timeout = httpx.Timeout(timeout_s, connect=5.0)
    fail = EndpointUnreachableError
    async with httpx.AsyncClient(transport=transport, timeout=timeout,
                                 verify=client_context(ca_file or tls_ca_file())) as client:
        try:
            response = await client.get(models_url, headers=headers)
        except httpx.ConnectError as error:
            raise fail(f"Endpoint {url} is unreachable: cannot connect ({error}).") from None
        except httpx.TimeoutException:
            raise fail(f"Endpoint {url} is unreachable: no answer within {timeout_s:.0f} s.") from None
        except httpx.TransportError as error:
            raise fail(f"Endpoint {url} is unreachable: {error}.") from None
    body = response.text.strip()[:300]
    if response.status_code == 401:
        why = ("it wants a Berth token and the workflow has none"
               if not token else "it refused the workflow's Berth token (expired, or for another endpoint)")
        raise fail(f"Endpoint {url} answered 401 ({body}): {why}.")
    if response.status_code == 403:
        raise fail(f"Endpoint {url} answered 403 ({body}): the workflow's owner is outside "
                   "its scope; ask its owner, or pin an endpoint you may reach.")
    if response.status_code == 404:
        raise fail(f"Endpoint {url} answered 404 ({body}): no such endpoint (stopped, or a "
                   "mistyped URL). `berth endpoint list` shows the ones you may reach.")
    if not response.is_success:
        raise fail(f"Endpoint {url} answered {response.status_code} ({body}).")
    try:
        models = tuple(str(item["id"]) for item in response.json().get("data", []))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise fail(f"Endpoint {url} is not an OpenAI-compatible API: /v1/models "
                   f"returned {body!r}.") from None
    if not models:
        raise fail(f"Endpoint {url} lists no model yet (no replica is ready): retry once "
                   "/v1/models lists one.")
    return models


def check_context(requested: int, served: int, where: str) -> None:
    """Refuse a MaxContextSize above the model's: OpenCode would send prompts the model rejects."""
    if requested > served:
        raise UserInputError(f"MaxContextSize={requested} is larger than {where} serves ({served} tokens); "
                             f"use MaxContextSize={served} or less.")


__all__: Sequence[str] = (
    "OFFLINE_CONFIG", "OFFLINE_ENV", "OPENCODE_VERSION", "EndpointUnreachableError", "ProviderTarget",
    "ServeCommand", "basic_credentials", "check_context", "default_output_limit", "generate_password",
    "opencode_binary", "opencode_config", "pick_default_model", "preflight", "render_serve", "served_target",
)
