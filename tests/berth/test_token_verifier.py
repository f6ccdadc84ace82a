"""TokenVerifier keeps the tokens it verified (issue 33: the API checked the endpoint proxy's one token's signature
on every audit post), and a kept token still ends with its expiry, its key and its audience."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest

import berth.security
from berth.errors import AuthenticationError
from berth.security import API_AUDIENCE, Identity, SigningKey, TokenVerifier

ALICE = Identity(user="alice", groups=("team",), org="acme")


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    return SigningKey.load_or_create(tmp_path)


def test_a_verified_token_is_not_decoded_again_and_each_caller_gets_its_own_claims(
        key: SigningKey, monkeypatch: pytest.MonkeyPatch) -> None:
    verifier = TokenVerifier.from_jwks(key.jwks())
    token = key.api_token(ALICE)
    first = verifier.verify(token, API_AUDIENCE)
    decodes = []
    monkeypatch.setattr(berth.security.jwt, "decode", lambda *a, **k: decodes.append(1) or jwt.decode(*a, **k))
    first["sub"] = "mallory"  # a caller's change to its claims
    again = verifier.verify(token, API_AUDIENCE)
    assert decodes == [] and again["sub"] == "alice" and again["aud"] == API_AUDIENCE


def test_a_kept_token_expires_on_time(key: SigningKey, monkeypatch: pytest.MonkeyPatch) -> None:
    verifier = TokenVerifier.from_jwks(key.jwks())
    token = key.api_token(ALICE, ttl_s=60)
    expires_at = verifier.verify(token, API_AUDIENCE)["exp"]
    monkeypatch.setattr(berth.security.time, "time", lambda: expires_at + 1.0)
    monkeypatch.setattr(jwt.api_jwt, "datetime", _Clock(expires_at + 1.0))
    with pytest.raises(AuthenticationError, match="Token expired"):
        verifier.verify(token, API_AUDIENCE)


@pytest.mark.parametrize("change", ["key rotated out", "another audience"])
def test_a_kept_token_is_refused_once_its_key_is_gone_and_for_another_audience(key: SigningKey, change: str) -> None:
    verifier = TokenVerifier.from_jwks(key.jwks())
    token = key.api_token(ALICE)
    verifier.verify(token, API_AUDIENCE)
    audience, refusal = API_AUDIENCE, "unknown key"
    if change == "key rotated out":
        verifier.keys.clear()
    else:
        audience, refusal = "endpoint:ep-1", "InvalidAudienceError"
    with pytest.raises(AuthenticationError, match=refusal):
        verifier.verify(token, audience)


class _Clock:
    """Stands in for PyJWT's `datetime` module: its `now` is a fixed time (the expiry check reads it)."""

    def __init__(self, at: float) -> None:
        import datetime

        self._at = datetime.datetime.fromtimestamp(at, tz=datetime.UTC)
        self.timezone = datetime.timezone
        self.timedelta = datetime.timedelta

    def now(self, tz: object = None) -> object:
        return self._at
