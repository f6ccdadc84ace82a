"""Who an endpoint token names: the endpoint proxy's check of a Berth JWT for one endpoint's audience,
kept until the token expires (verifying costs ~50 µs; the hot path verifies a token once)."""

from __future__ import annotations

import time

from berth.errors import AuthenticationError
from berth.security import Identity, TokenVerifier, endpoint_audience
from gateway.credentials import find_token

MAX_CACHED = 10_000  # distinct (token, endpoint) pairs kept; cleared when full rather than grown


class TokenIdentities:
    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier
        self._verified: dict[tuple[str, str], tuple[Identity, float]] = {}

    def identity(self, token: str, endpoint_id: str) -> Identity:
        """The caller `token` names on `endpoint_id`; AuthenticationError when it is not valid there."""
        key = (token, endpoint_id)
        cached = self._verified.get(key)
        if cached is not None and cached[1] > time.time():
            return cached[0]
        claims = self.verifier.verify(token, endpoint_audience(endpoint_id))
        identity = Identity.from_claims(claims)
        if len(self._verified) > MAX_CACHED:
            self._verified.clear()
        self._verified[key] = (identity, float(claims["exp"]))
        return identity

    def of(self, headers: list[tuple[bytes, bytes]], endpoint_id: str) -> tuple[Identity | None, bool]:
        """The caller the request's endpoint token names (None: no valid one), and whether to strip
        Authorization: a valid Berth token is consumed there even when it identifies nobody to the service."""
        token, from_authorization = find_token(headers)
        identity: Identity | None = None
        if token:
            try:
                identity = self.identity(token, endpoint_id)
            except AuthenticationError:
                identity = None
        return identity, from_authorization and identity is not None
