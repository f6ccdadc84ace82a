"""Keys, tokens and encryption: Ed25519-signed JWTs (API and endpoint tokens, caller assertions)
and AES-GCM for secrets at rest and Temporal payloads."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from berth.errors import AuthenticationError

ISSUER = "berth"
API_AUDIENCE = "berth-api"
ALGORITHM = "EdDSA"
WORKFLOW_INPUT_AUDIENCE = "berth-workflow-input"
# A signed start is checked when the control worker first runs it: a day lets a start queued while the
# worker is down still run, and bounds how long a grant copied out of a history could start its one
# workflow ID again.
WORKFLOW_GRANT_TTL_S = 24 * 3600


# A gateway's token for its owner's copies' keys (server/replica_keys.py): read by no other route.
REPLICA_KEYS_AUDIENCE = "berth-replica-keys"


def endpoint_audience(endpoint_id: str) -> str:
    return f"endpoint:{endpoint_id}"


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # the keys dir: owner only, also where an older Berth made it 0755
    # Written whole under a private name, then linked into place: a process that loses the race to create
    # the key (FileExistsError) must never read a file the winner has created but not yet written.
    staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(staging, path)  # atomic, and FileExistsError when another process got there first
    finally:
        os.unlink(staging)


def load_or_create_secret(path: Path) -> bytes:
    """32 random bytes kept in a 0600 file of the state dir's keys (the first process to need it makes it)."""
    if not path.exists():
        try:
            _write_private(path, secrets.token_bytes(32))
        except FileExistsError:
            pass  # another process created it first; use theirs
    return path.read_bytes()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class Identity:
    """Who a token or assertion speaks for."""

    user: str
    groups: tuple[str, ...] = ()
    org: str = ""
    admin: bool = False

    def claims(self) -> dict[str, Any]:
        return {"sub": self.user, "groups": list(self.groups), "org": self.org, "admin": self.admin}

    @classmethod
    def from_claims(cls, claims: dict[str, Any]) -> Identity:
        return cls(
            user=str(claims["sub"]),
            groups=tuple(str(g) for g in claims.get("groups", [])),
            org=str(claims.get("org", "")),
            admin=bool(claims.get("admin", False)),
        )


@dataclass
class SigningKey:
    """The control plane's Ed25519 key: signs tokens; its public half is published as JWKS."""

    private: Ed25519PrivateKey
    kid: str

    @classmethod
    def load_or_create(cls, keys_dir: Path) -> SigningKey:
        path = keys_dir / "signing.pem"
        if not path.exists():
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            try:
                _write_private(path, pem)
            except FileExistsError:
                pass  # another process created it first; use theirs
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
        assert isinstance(loaded, Ed25519PrivateKey)
        raw = loaded.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return cls(private=loaded, kid=_b64url(raw)[:16])

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    def jwks(self) -> dict[str, Any]:
        raw = self.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw), "kid": self.kid,
                          "alg": ALGORITHM, "use": "sig"}]}

    def sign(self, claims: dict[str, Any], ttl_s: float) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "iat": now, "nbf": now - 1, "exp": now + int(ttl_s),
                   "jti": uuid.uuid4().hex, **claims}
        return jwt.encode(payload, self.private, algorithm=ALGORITHM, headers={"kid": self.kid})

    def api_token(self, identity: Identity, ttl_s: float = 365 * 24 * 3600, kind: str = "user",
                  note: str = "") -> str:
        """An API token; `kind` and `note` say in `berth token list` why it exists (a token minted
        outside the API is recorded from them when first seen)."""
        claims = {**identity.claims(), "aud": API_AUDIENCE, "typ": "api", "use": kind}
        return self.sign({**claims, "note": note} if note else claims, ttl_s)

    def endpoint_token(self, identity: Identity, endpoint_id: str, ttl_s: float) -> str:
        return self.sign({**identity.claims(), "aud": endpoint_audience(endpoint_id), "typ": "endpoint"}, ttl_s)

    def workflow_grant(self, user: str, workflow_id: str, digest: str,
                       ttl_s: float = WORKFLOW_GRANT_TTL_S) -> str:
        """The API's signature over one workflow's input (its digest): the control worker runs only what
        the API started, and holds only the public key, as node agents hold none."""
        return self.sign({"sub": user, "aud": WORKFLOW_INPUT_AUDIENCE, "typ": "workflow-input",
                          "wid": workflow_id, "digest": digest}, ttl_s)

    def replica_keys_token(self, owner: Identity, ttl_s: float) -> str:
        """What a gateway run for `owner` reads its discovered copies' keys with (never a user's to hold).
        It carries the owner's claims, like the owner token the gateway discovers with: the same reach."""
        return self.sign({**owner.claims(), "aud": REPLICA_KEYS_AUDIENCE, "typ": "service"}, ttl_s)

    def caller_assertion(self, identity: Identity, endpoint_id: str, ttl_s: float = 60) -> str:
        claims = {"sub": identity.user, "groups": list(identity.groups), "org": identity.org,
                  "aud": endpoint_id, "typ": "caller"}
        return self.sign(claims, min(ttl_s, 60))


ISSUED_CACHE = 10_000  # distinct tokens whose issued() answer is kept
COPY_KEYS_CACHED = 10_000  # copies whose replica key ReplicaKeys keeps (each is an HMAC to derive)
VERIFIED_CACHE = 10_000  # distinct (token, audience) pairs verify() keeps; cleared when full rather than grown


@dataclass
class TokenVerifier:
    """Verifies Berth JWTs against one or more public keys (kid → key)."""

    keys: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    # issued()'s answers by token: the proxy asks it of every request's Authorization (which credentials to
    # strip), ~40 µs of unverified decoding each time. Bounded: cleared when full, never grown past it.
    _issued: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)
    # verify()'s tokens that verified, by (token, audience): their claims, and the id and key they were signed by.
    _verified: dict[tuple[str, str], tuple[dict[str, Any], str, Ed25519PublicKey]] = field(
        default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_jwks(cls, jwks: dict[str, Any]) -> TokenVerifier:
        keys: dict[str, Ed25519PublicKey] = {}
        for item in jwks.get("keys", []):
            if item.get("kty") == "OKP" and item.get("crv") == "Ed25519":
                raw = base64.urlsafe_b64decode(item["x"] + "=" * (-len(item["x"]) % 4))
                keys[item["kid"]] = Ed25519PublicKey.from_public_bytes(raw)
        return cls(keys)

    def issued(self, token: str) -> bool:
        """Whether `token` is a Berth token, whatever its audience and even expired: Berth's issuer, or
        signed under one of these keys. Read unverified on purpose: it decides only what to strip before
        a request leaves Berth, and stripping a forgery that looks like one of ours costs nothing."""
        if not token.startswith("eyJ") or token.count(".") != 2:
            return False  # not a JWT: the common case (an sk-… key) costs one comparison
        known = self._issued.get(token)
        if known is None:
            try:
                header = jwt.get_unverified_header(token)
                claims = jwt.decode(token, options={"verify_signature": False})
            except jwt.PyJWTError:
                known = False
            else:
                known = header.get("kid") in self.keys or claims.get("iss") == ISSUER
            if len(self._issued) >= ISSUED_CACHE:
                self._issued.clear()
            self._issued[token] = known
        return known

    def verify(self, token: str, audience: str) -> dict[str, Any]:
        """The token's claims, when it is signed by one of these keys for `audience` and not expired. A token
        verified once is kept (bounded; only tokens that verified get in) until it expires or its key is gone:
        Berth's own services present the same token on every call (the endpoint proxy posts audit batches many
        times a second), and decoding and checking its signature cost ~0.2 ms each time. Revocation is the
        caller's check, made on every use (server/guards.py)."""
        cached = self._verified.get((token, audience))
        if cached is not None:
            kept, kept_kid, kept_key = cached
            if kept["exp"] > time.time() and self.keys.get(kept_kid) is kept_key:
                return dict(kept)  # a copy: a caller's change never reaches the next caller
            self._verified.pop((token, audience), None)
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = self.keys.get(kid) if kid else None
            if key is None:
                raise AuthenticationError("The token was signed by an unknown key.")
            claims = jwt.decode(token, key, algorithms=[ALGORITHM], audience=audience, issuer=ISSUER,
                                options={"require": ["exp", "sub", "aud"]})
        except jwt.ExpiredSignatureError:
            raise AuthenticationError("Token expired: get a new one (an administrator runs "
                                      "`berth login --user NAME --print-token`).") from None
        except jwt.PyJWTError as error:
            raise AuthenticationError(f"The token is not valid here ({type(error).__name__}).") from None
        if len(self._verified) >= VERIFIED_CACHE:
            self._verified.clear()
        self._verified[(token, audience)] = (dict(claims), str(kid), key)
        return claims


class Cipher:
    """AES-256-GCM with a key file in the state dir: secrets at rest and Temporal payloads."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    @classmethod
    def load_or_create(cls, keys_dir: Path, name: str = "data.key") -> Cipher:
        return cls(load_or_create_secret(keys_dir / name))

    def encrypt(self, plaintext: bytes, associated: bytes = b"") -> bytes:
        nonce = secrets.token_bytes(12)
        return nonce + self._aead.encrypt(nonce, plaintext, associated)

    def decrypt(self, data: bytes, associated: bytes = b"") -> bytes:
        return self._aead.decrypt(data[:12], data[12:], associated)

    def encrypt_json(self, value: Any) -> str:
        return base64.b64encode(self.encrypt(json.dumps(value).encode())).decode()

    def decrypt_json(self, data: str) -> Any:
        return json.loads(self.decrypt(base64.b64decode(data)))


class ReplicaKeys:
    """Each copy's vLLM API key: HMAC-SHA256 of the copy id under one secret of the state dir's keys.

    Derived, not generated and carried: the node agent that starts a copy (it hands the key to vLLM in
    VLLM_API_KEY, never in argv) and the control plane that gives it to Berth's own callers of the copy
    (the endpoint proxy, LiteLLM, the gateway, through service- or admin-only routes) compute the same key
    from the same secret, so no key is stored, written to a Temporal history, or sent to a node."""

    PREFIX = "sk-berth-replica-"

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        # The routes table sends every copy's key each second to each proxy: an HMAC a copy a read (~7 us) was most
        # of the API's CPU for a large table. Bounded, as copies come and go for good.
        self.for_copy: Callable[[str], str] = functools.lru_cache(maxsize=COPY_KEYS_CACHED)(self._derive)

    @classmethod
    def load_or_create(cls, keys_dir: Path, name: str = "replica.key") -> ReplicaKeys:
        return cls(load_or_create_secret(keys_dir / name))

    def _derive(self, copy_id: str) -> str:
        digest = hmac.new(self._secret, b"berth-replica-key\0" + copy_id.encode(), hashlib.sha256).digest()
        return self.PREFIX + _b64url(digest)


def generate_api_key() -> str:
    return "sk-berth-" + secrets.token_urlsafe(32)
