"""Minting an endpoint token: signed for its holder and recorded (so it can be listed and revoked one by one).
Both the public route (server/routes/endpoint_tokens.py) and the internal one a service's launch calls
(server/routes/internal.py) mint through here."""

from __future__ import annotations

from typing import Any

from berth.security import Identity, endpoint_audience
from server.context import ServerContext


def mint_endpoint_token(context: ServerContext, holder: Identity, endpoint_id: str, ttl_s: float, minted_by: str,
                        note: str = "") -> tuple[str, dict[str, Any]]:
    """Sign an endpoint token naming `holder` and record it; its token and claims. Blocking (the store):
    call it from a thread."""
    token = context.signing.endpoint_token(holder, endpoint_id, ttl_s)
    claims = context.verifier.verify(token, endpoint_audience(endpoint_id))
    context.store.endpoint_tokens.record(claims, endpoint_id, minted_by, note)
    return token, claims
