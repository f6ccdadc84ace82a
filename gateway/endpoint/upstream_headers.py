"""CallerHeaders: the headers the endpoint proxy sends upstream: the client's, less every Berth credential
and hop-by-hop header, plus a signed `x-berth-caller` assertion saying who the caller is (cached per caller
and endpoint: signing costs ~50 µs)."""

from __future__ import annotations

import time
from collections.abc import Callable

from berth.security import Identity, SigningKey, TokenVerifier
from gateway.edge.credentials import KEY_MARK, TOKEN_MARK, without_berth_credential
from gateway.edge.routing import Replica
from gateway.edge.upstream import HOP_BY_HOP

CALLER_HEADER = b"x-berth-caller"
# A client's own x-berth-caller is always dropped: only this proxy may speak for a caller.
STRIPPED_REQUEST = HOP_BY_HOP | {b"berth-authorization", CALLER_HEADER}
ASSERTION_TTL_S = 60.0
# An assertion is reused this long (signing costs ~50 µs; the hot path signs at most twice a minute
# per caller and endpoint), leaving it ≥ 30 s of life when it reaches the service.
ASSERTION_REUSE_S = 30.0

Headers = list[tuple[bytes, bytes]]


class CallerHeaders:
    def __init__(self, verifier: TokenVerifier, signer: SigningKey | None) -> None:
        self.verifier = verifier
        self.signer = signer  # None: no caller assertions (the service then wants a key)
        self._assertions: dict[tuple[Identity, str], tuple[bytes, float]] = {}

    def assertion(self, identity: Identity, endpoint_id: str) -> bytes | None:
        if self.signer is None:
            return None
        key = (identity, endpoint_id)
        now = time.monotonic()
        cached = self._assertions.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        token = self.signer.caller_assertion(identity, endpoint_id, ASSERTION_TTL_S).encode()
        if len(self._assertions) > 10_000:
            self._assertions.clear()
        self._assertions[key] = (token, now + ASSERTION_REUSE_S)
        return token

    def build(self, headers: Headers, strip_authorization: bool, identity: Identity | None, endpoint_id: str,
              ) -> tuple[Headers, Callable[[], Headers]]:
        """The headers sent upstream, and how to renew them for a later try. Every Berth credential goes,
        whatever its audience: the service's owner must not receive one."""
        # One pass (a request has ~16 headers, each looked at on the hot path): hop-by-hop and Berth's own
        # headers go, then any header holding a Berth credential (gateway/edge/credentials.py).
        verifier = self.verifier
        upstream_headers: Headers = []
        for item in headers:
            name, value = item
            if name in STRIPPED_REQUEST or (strip_authorization and name == b"authorization"):
                continue
            if KEY_MARK in value or TOKEN_MARK in value or name == b"cookie":
                cleaned = without_berth_credential(item, verifier)
                if cleaned is not None:
                    upstream_headers.append(cleaned)
            else:
                upstream_headers.append(item)  # nothing to decode: the common case
        caller = self.assertion(identity, endpoint_id) if identity is not None else None
        if caller is not None:
            upstream_headers.append((CALLER_HEADER, caller))
        signer = self.signer

        def renewed() -> Headers:
            """With an assertion signed now: a request held while LiteLLM restarts can outwait the one it
            came with (60 s of life, reused for up to 30 s)."""
            if caller is None or identity is None or signer is None:
                return upstream_headers
            fresh = signer.caller_assertion(identity, endpoint_id, ASSERTION_TTL_S).encode()
            return [(name, fresh if name == CALLER_HEADER else value) for name, value in upstream_headers]

        return upstream_headers, renewed


def to_target(target: Replica, headers: Headers) -> Headers:
    """A copy of a pool gets its own key as `Authorization`, in place of whatever the client sent; a
    service (LiteLLM, the gateway, OpenCode) gets the headers as they are."""
    if not target.api_key:
        return headers
    return [(name, value) for name, value in headers if name != b"authorization"] + target.authorization()
