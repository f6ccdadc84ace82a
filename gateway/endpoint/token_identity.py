"""Who an endpoint token names: the endpoint proxy's check of a Berth JWT for one endpoint's audience,
kept until the token expires (verifying costs ~50 µs; the hot path verifies a token once), and refused
once its id is among the endpoint's revoked ones (the routes table's `revoked_tokens`)."""

from __future__ import annotations

import time

from berth.errors import AuthenticationError
from berth.security import Identity, TokenVerifier, endpoint_audience
from gateway.edge.credentials import find_token

MAX_CACHED = 10_000  # distinct (token, endpoint) pairs kept; cleared when full rather than grown


class TokenIdentities:
    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier
        # (token, endpoint) → (whom it names, its expiry, its id): the id is checked against the revoked
        # ones on every request, since a revocation may come after the token was first verified.
        self._verified: dict[tuple[str, str], tuple[Identity, float, str]] = {}

    def identity(self, token: str, endpoint_id: str, revoked: frozenset[str] = frozenset()) -> Identity:
        """The caller `token` names on `endpoint_id`; AuthenticationError when it is not valid there or its
        id is in `revoked`."""
        key = (token, endpoint_id)
        cached = self._verified.get(key)
        if cached is None or cached[1] <= time.time():
            claims = self.verifier.verify(token, endpoint_audience(endpoint_id))
            cached = (Identity.from_claims(claims), float(claims["exp"]), str(claims.get("jti", "")))
            if len(self._verified) > MAX_CACHED:
                self._verified.clear()
            self._verified[key] = cached
        identity, _expires_at, token_id = cached
        if token_id and token_id in revoked:
            raise AuthenticationError("The endpoint token was revoked.")
        return identity

    def of(self, headers: list[tuple[bytes, bytes]], endpoint_id: str,
           revoked: frozenset[str] = frozenset()) -> tuple[Identity | None, bool]:
        """The caller the request's endpoint token names (None: no valid one, or a revoked one), and whether
        to strip Authorization: a valid Berth token is consumed there even when it identifies nobody to the
        service."""
        token, from_authorization = find_token(headers)
        identity: Identity | None = None
        if token:
            try:
                identity = self.identity(token, endpoint_id, revoked)
            except AuthenticationError:
                identity = None
        return identity, from_authorization and identity is not None
