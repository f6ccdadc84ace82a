"""One GET of the Berth API with the standard library (`http.client`, `ssl`), for the fast paths: the address,
token, trust, timeouts and errors of berth/api_transport.py's httpx client, without importing httpx, httpcore,
anyio and asyncio (110-140 ms of CPU of the CLI's start; a GET this way took 49 ms of CPU where the async httpx
client took 229 ms, same rounds: docs/performance.md, "CLI start (issue 33)").

`target()` takes the client configuration as berth/client_config.py reads it, and returns None for anything whose
meaning it would have to guess (a value pydantic would coerce or refuse, a proxy httpx would use, a URL it would
read otherwise): the normal path answers those."""

from __future__ import annotations

import codecs
import http.client
import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from berth.api_errors import refusal, unreachable, untrusted
from berth.client_config import API_CONNECT_TIMEOUT_S, API_TIMEOUT_S, plain_client_values
from berth.tls_client import url_context

# httpx's proxies (trust_env), and its CA store for an https API when one of these is set: left to httpx.
_PROXY_VARIABLES = {"http": ("http_proxy", "all_proxy"), "https": ("https_proxy", "all_proxy")}
_CA_STORE_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")


@dataclass(frozen=True)
class ApiTarget:
    base_url: str  # as ApiTransport keeps it: no trailing slash, what its errors name
    scheme: str
    host: str
    port: int | None
    path_prefix: str
    token: str | None
    ca_file: str | None


def target(values: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> ApiTarget | None:
    """The API to ask, from berth.client_config.client_config_values(), or None to leave the command to the
    normal path."""
    plain = plain_client_values(values)
    if plain is None:
        return None  # pydantic's to coerce or refuse
    api_url, token, ca_file = plain
    if token is not None and not (token.isascii() and token.isprintable()):
        return None  # httpx's to refuse or encode
    base_url = api_url.rstrip("/")
    parts = _plain_url(base_url)
    if parts is None or (parts.scheme == "https" and any(environ.get(name) for name in _CA_STORE_VARIABLES)) or any(
            value and name.lower() in _PROXY_VARIABLES[parts.scheme] for name, value in environ.items()):
        return None
    return ApiTarget(base_url, parts.scheme, parts.hostname or "", parts.port, parts.path, token or None, ca_file)


def _plain_url(url: str) -> SplitResult | None:
    """An http(s) URL of a host, maybe a port and a path, in characters httpx sends as they are; else None."""
    if not (url.isascii() and url.isprintable()) or " " in url or "%" in url:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 — a port that is not a number raises here
    except ValueError:
        return None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.username is not None
            or parts.password is not None or parts.query or parts.fragment):
        return None
    return parts


def get(api: ApiTarget, path: str) -> Any:
    """The API's answer to `GET path`, read as ApiTransport.request reads it (JSON, text or None); Berth's
    error, with ApiTransport's words, for a refusal or an API that cannot be reached."""
    connection = _connection(api)
    headers = {"Accept": "*/*", **({"Authorization": f"Bearer {api.token}"} if api.token else {})}
    try:
        connection.connect()
        if connection.sock is not None:
            connection.sock.settimeout(API_TIMEOUT_S)  # the connect's own bound is API_CONNECT_TIMEOUT_S
        connection.request("GET", api.path_prefix + path, headers=headers)
        response = connection.getresponse()
        content = response.read()
    except (OSError, http.client.HTTPException) as error:
        raise untrusted(api.base_url, error) or unreachable(api.base_url) from None
    finally:
        connection.close()
    content_type = response.getheader("content-type", "")
    if 200 <= response.status < 300:
        if response.status == 204 or not content:
            return None
        if content_type.startswith("application/json"):
            return json.loads(content)
        return _text(content, content_type)
    raise refusal(response.status, _text(content, content_type), content)


def _connection(api: ApiTarget) -> http.client.HTTPConnection:
    if api.scheme == "http":
        return http.client.HTTPConnection(api.host, api.port, timeout=API_CONNECT_TIMEOUT_S)
    trust = url_context(api.base_url, api.ca_file)  # berth.errors.UserInputError for a CA file it cannot read
    if trust is True:  # httpx's own default for verify=True: certifi's bundle
        import certifi

        trust = ssl.create_default_context(cafile=certifi.where())
    assert isinstance(trust, ssl.SSLContext)
    return http.client.HTTPSConnection(api.host, api.port, timeout=API_CONNECT_TIMEOUT_S, context=trust)


def _text(content: bytes, content_type: str) -> str:
    """The body as httpx's `Response.text` decodes it: the charset the header names, else UTF-8; bytes that
    do not decode replaced."""
    encoding = "utf-8"
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.strip().partition("=")
        if name.lower() == "charset":
            try:
                encoding = codecs.lookup(value.strip("'\" ")).name
            except LookupError:
                pass
    return content.decode(encoding, errors="replace")
