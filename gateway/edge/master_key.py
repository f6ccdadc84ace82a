"""MasterKeyGate: the catalog gateway's `MasterKeySecret`, honoured as LiteLLM honours its master key
behind Berth (gateway.litellm_hooks.auth, docs/litellm.md "Auth"): a key sent decides alone — the master key
passes, any other is a 401 — and without a key the endpoint proxy's signed caller assertion must vouch
for the caller, else a 401."""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from berth.errors import AuthenticationError, BerthError
from berth.security import TokenVerifier
from gateway.edge.litellm_contract import INVALID_KEY_MESSAGE, NO_KEY_MESSAGE, auth_error

log = logging.getLogger("berth.gateway")

ASSERTION_HEADER: Final = b"x-berth-caller"
# Where LiteLLM reads a key, most binding first (x-litellm-api-key wins over Authorization).
KEY_HEADERS: Final = (b"x-litellm-api-key", b"authorization", b"api-key", b"x-api-key")
# As gateway.litellm_hooks.auth: a fetched key set is trusted this long; after a failed fetch, answer
# without the network this long so a control-plane outage does not make each keyless request wait.
JWKS_CACHE_S: Final = 60.0
JWKS_RETRY_AFTER_FAILURE_S: Final = 5.0
MAX_KEY_BYTES: Final = 4096


class MasterKeyGate:
    """Admits a request by its key or by its caller assertion; `refusal` says why not."""

    def __init__(self, master_key: str, endpoint_id: str, jwks: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._master_key = master_key.encode()
        self._endpoint_id = endpoint_id
        self._jwks = jwks
        # A Berth token is never a LiteLLM key: the endpoint proxy strips them, this is the backstop.
        self._berth_tokens = TokenVerifier()
        self._verifier: TokenVerifier | None = None
        self._fetched_at = -JWKS_CACHE_S
        self._failed_at = -JWKS_RETRY_AFTER_FAILURE_S

    async def refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, Any]] | None:
        """None when the request may pass, else LiteLLM's (status, body)."""
        key = sent_key(headers, self._berth_tokens)
        if key:
            if hmac.compare_digest(key, self._master_key):
                return None
            return 401, auth_error(INVALID_KEY_MESSAGE, 401)
        assertion = next((value for name, value in headers if name == ASSERTION_HEADER), b"")
        if assertion and await self._vouches(assertion.decode("latin-1")):
            return None
        return 401, auth_error(NO_KEY_MESSAGE, 401)

    async def _vouches(self, assertion: str) -> bool:
        verifier = await self._current_verifier()
        if verifier is None:
            return False
        try:
            claims = verifier.verify(assertion, self._endpoint_id)
        except AuthenticationError as error:
            log.debug("caller assertion refused: %s", type(error).__name__)
            return False
        return claims.get("typ") == "caller"

    async def _current_verifier(self) -> TokenVerifier | None:
        """The signing keys from the API's JWKS, refetched each minute; the last set fetched stays in use
        while the API cannot be reached (an outage must not turn identified callers into 401s)."""
        now = time.monotonic()
        stale = now - self._fetched_at > JWKS_CACHE_S
        if stale and now - self._failed_at > JWKS_RETRY_AFTER_FAILURE_S:
            try:
                self._verifier = TokenVerifier.from_jwks(await self._jwks())
                self._fetched_at = now
            except (BerthError, ValueError, KeyError, TypeError) as error:
                self._failed_at = now
                log.warning("cannot read the signing keys (JWKS): %s", type(error).__name__)
        return self._verifier


def sent_key(headers: list[tuple[bytes, bytes]], berth_tokens: TokenVerifier) -> bytes:
    """The key a client sent, as LiteLLM extracts it ("Bearer " dropped); b"" when none."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        if name in KEY_HEADERS and name not in found:
            text = value.strip()
            if text[:7].lower() == b"bearer ":
                text = text[7:].strip()
            if text and len(text) <= MAX_KEY_BYTES and not berth_tokens.issued(text.decode("latin-1")):
                found[name] = text
            elif len(text) > MAX_KEY_BYTES:
                found[name] = b"\0"  # oversized: a wrong key, never compared at length
    return next((found[name] for name in KEY_HEADERS if name in found), b"")
