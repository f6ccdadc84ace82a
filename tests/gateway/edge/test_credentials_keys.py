"""A Berth API key, plain (`bk_…`) or in LiteLLM's virtual-key form (`sk-bk_…`), is found in the headers
clients put it in and never leaves Berth, whatever header (or cookie) carries it; a service key stays."""

from __future__ import annotations

from pathlib import Path

from berth.security import Identity, SigningKey, TokenVerifier
from gateway.edge.credentials import find_key, strip_berth_credentials

KEY = "bk_0123456789ab_" + "s" * 43


def test_a_key_is_found_in_authorization_then_litellms_headers() -> None:
    assert find_key([(b"authorization", f"Bearer {KEY}".encode())]) == KEY
    assert find_key([(b"x-litellm-api-key", f"sk-{KEY}".encode())]) == KEY
    assert find_key([(b"x-api-key", KEY.encode()), (b"authorization", b"Bearer sk-litellm-master")]) == KEY
    other = "bk_ba9876543210_" + "t" * 43
    assert find_key([(b"x-api-key", other.encode()), (b"authorization", f"Bearer {KEY}".encode())]) == KEY
    assert find_key([(b"authorization", b"Bearer sk-litellm-master"), (b"x-other", KEY.encode())]) is None


def test_a_key_in_any_header_or_cookie_is_stripped_and_a_service_key_kept(tmp_path: Path) -> None:
    verifier = TokenVerifier.from_jwks(SigningKey.load_or_create(tmp_path).jwks())
    headers = [(b"authorization", f"Bearer {KEY}".encode()), (b"x-api-key", f"sk-{KEY}".encode()),
               (b"x-litellm-api-key", f"Bearer sk-{KEY}".encode()), (b"api-key", KEY.encode()),
               (b"cookie", f"session=1; stolen={KEY}".encode()), (b"x-service-key", b"sk-litellm-master")]
    kept = strip_berth_credentials(headers, verifier)
    assert kept == [(b"cookie", b"session=1"), (b"x-service-key", b"sk-litellm-master")]
    assert KEY.encode() not in b"".join(value for _, value in kept)


def test_a_berth_token_is_stripped_every_time_and_the_answers_kept_are_bounded(tmp_path: Path) -> None:
    """issued() keeps its answer per token (the proxy asks it of every request): the same token is stripped on
    its hundredth request as on its first, a foreign JWT kept each time, and the kept answers stay bounded."""
    import jwt

    from berth import security

    signing = SigningKey.load_or_create(tmp_path)
    verifier = TokenVerifier.from_jwks(signing.jwks())
    ours = signing.sign({"sub": "alice", "aud": "ep-1"}, 60)
    theirs = jwt.encode({"sub": "x", "iss": "someone-else"}, "k" * 32, algorithm="HS256")
    headers = [(b"authorization", f"Bearer {ours}".encode()), (b"x-upstream", theirs.encode())]
    for _ in range(100):
        assert strip_berth_credentials(headers, verifier) == [(b"x-upstream", theirs.encode())]
    for number in range(security.ISSUED_CACHE + 5):
        verifier.issued(jwt.encode({"n": number}, "k" * 32, algorithm="HS256"))
    assert len(verifier._issued) <= security.ISSUED_CACHE
    assert verifier.issued(ours) and not verifier.issued(theirs)


def test_only_values_holding_a_key_or_token_mark_are_decoded_and_every_credential_still_goes(tmp_path: Path) -> None:
    key = SigningKey.load_or_create(tmp_path)
    verifier = TokenVerifier.from_jwks(key.jwks())
    token = key.api_token(Identity("alice"))
    headers = [(b"user-agent", b"OpenAI/Python 1.59.7"), (b"x-api-key", b"  sk-bk_abc_def"),
               (b"x-other", f"Bearer {token}".encode()), (b"authorization", b"BEARER bk_abc_def"),
               (b"x-service", b"sk-not-berth"), (b"x-eyj", b"eyJnot.a-token"),
               (b"cookie", f"a=1; berth_token={token}".encode())]
    assert strip_berth_credentials(headers, verifier) == [
        (b"user-agent", b"OpenAI/Python 1.59.7"), (b"x-service", b"sk-not-berth"), (b"x-eyj", b"eyJnot.a-token"),
        (b"cookie", b"a=1")]
    assert find_key(headers[:1]) is None
