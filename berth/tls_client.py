"""The client side's trust: one place that turns "trust this CA file" into the `ssl.SSLContext` every Berth
HTTP client uses. Apart from berth/tls.py (which makes CAs) so that a client never imports `cryptography`:
47 ms of CPU of the CLI's start (issue 33, docs/performance.md)."""

from __future__ import annotations

import ssl
from pathlib import Path

from berth.errors import UserInputError


def client_context(ca_file: str | Path | None) -> ssl.SSLContext | bool:
    """What httpx's `verify=` gets: the system store (True) unless a CA file is named, then that CA as well.
    A named file that cannot be read is refused in one line rather than falling back to no trust."""
    if not ca_file:
        return True
    try:
        context = ssl.create_default_context()
        context.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as error:
        raise UserInputError(f"Cannot use the CA file {ca_file} ({error.__class__.__name__}); "
                             "check BERTH_TLS_CA or the client config's ca_file.") from None
    return context


def url_context(url: str, ca_file: str | Path | None) -> ssl.SSLContext | bool:
    """`client_context(ca_file)` for an https URL. For a plain-http one, a context that trusts nothing: a
    client of an http API never needs the CA store, whose loading (httpx's default, certifi's bundle) is 30 ms
    of CPU in every CLI command's start (issue 33); an https URL it were sent to anyway would fail
    verification, never go unchecked."""
    if url.lower().startswith("https:"):
        return client_context(ca_file)
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
