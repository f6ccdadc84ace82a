"""Where the client's configuration comes from, read without pydantic: the client config file, then
`BERTH_API_URL`, `BERTH_TOKEN` and `BERTH_TLS_CA` over it. `berth.settings.ClientConfig` validates these values
into its model; `berth workflow list`'s fast path (cli/fast/) takes them as they are, so that the CLI reads its
configuration in one place whether or not it imports pydantic (issue 33: 190 ms of CPU for Typer, Rich,
pydantic and httpx against a 150 ms goal)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from berth.ports import DEFAULT_PORT_BASE

# The embedded stack's API (its port base + 2), when neither the file nor the environment names one.
DEFAULT_API_URL = f"http://127.0.0.1:{DEFAULT_PORT_BASE + 2}"
# How long a client waits for the API: to connect, and for each read or write after that.
API_CONNECT_TIMEOUT_S = 5.0
API_TIMEOUT_S = 30.0


def client_config_path() -> Path:
    """`BERTH_CONFIG`, else `$XDG_CONFIG_HOME/berth/config.json` (`~/.config/berth/config.json`)."""
    env = os.environ.get("BERTH_CONFIG")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "berth" / "config.json"


def tls_ca_file(environ: Mapping[str, str] = os.environ) -> str | None:
    """`BERTH_TLS_CA`: a PEM CA that Berth's own HTTP clients (CLI, node agents, worker, proxy, services)
    trust besides the system store, for an API and endpoint proxy served with a private CA."""
    return environ.get("BERTH_TLS_CA", "").strip() or None


def client_config_values() -> dict[str, object]:
    """The client's settings as read, unvalidated: the defaults < the file's (when it exists) < the environment's.
    The file holds one JSON object; anything else is the caller's to refuse."""
    path = client_config_path()
    data: dict[str, object] = {"api_url": DEFAULT_API_URL}
    if path.exists():
        data.update(json.loads(path.read_text()))
    if os.environ.get("BERTH_API_URL"):
        data["api_url"] = os.environ["BERTH_API_URL"]
    if os.environ.get("BERTH_TOKEN"):
        data["token"] = os.environ["BERTH_TOKEN"]
    ca_file = tls_ca_file()
    if ca_file:
        data["ca_file"] = ca_file
    return data


def plain_client_values(values: Mapping[str, object]) -> tuple[str, str | None, str | None] | None:
    """The API URL, token and CA file from client_config_values() when each is a plain string as read (the
    token and CA file may be absent): the usual case, which needs no coercion. Else None: then
    berth.settings.ClientConfig's to coerce or refuse (other keys it ignores, and so do its callers)."""
    api_url, token, ca_file = values.get("api_url"), values.get("token"), values.get("ca_file")
    if isinstance(api_url, str) and isinstance(token, str | None) and isinstance(ca_file, str | None):
        return api_url, token, ca_file
    return None
