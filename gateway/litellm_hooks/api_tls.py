"""Trust for the control plane's https URLs, as the LiteLLM-side hooks (replica sync, auth) call them."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Final

from berth.settings import tls_ca_file


def api_ssl_context(environ: Mapping[str, str]) -> ssl.SSLContext:
    """Trust for the control plane's https URLs: the system store plus BERTH_TLS_CA (the private CA a
    `berth up --tls` stack serves with; the node agent passes it on). Shared by the replica sync's reads and the
    auth hook's JWKS fetch."""
    context: Final = ssl.create_default_context()
    ca_file: Final = tls_ca_file(environ)
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context
