"""Berth API keys (`bk_<prefix>_<secret>`): their format, and the HMAC that stores them.

A key is looked up by its prefix and checked by a constant-time compare of HMAC-SHA256(server secret,
prefix + secret): the store holds the HMAC only, so a copy of the database mints no working key. The
server secret is a file: `BERTH_KEY_HMAC_SECRET_FILE` when set (a missing or empty one is an error,
never a fallback), else one the control plane generates at first start in the state dir's keys."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from berth.errors import UserInputError
from berth.security import load_or_create_secret

KEY_PREFIX = "bk_"
# The prefix is hex (no `_`), so the first `_` after it ends it; the secret is 32 urlsafe random bytes.
KEY_PATTERN = re.compile(r"^bk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
SECRET_FILE_NAME = "api-key-hmac.key"


@dataclass(frozen=True)
class PresentedKey:
    prefix: str
    secret: str


def looks_like_key(text: str) -> bool:
    """Whether a credential is meant as a Berth API key (checked further by the store, never trusted)."""
    return text.startswith(KEY_PREFIX)


def parse_key(text: str) -> PresentedKey | None:
    match = KEY_PATTERN.match(text.strip())
    return PresentedKey(match.group(1), match.group(2)) if match else None


def new_key(prefix: str | None = None) -> tuple[str, PresentedKey]:
    """A fresh key's plaintext and parts; `prefix` kept on rotation (the key's id and prefix stay)."""
    parts = PresentedKey(prefix or secrets.token_hex(6), secrets.token_urlsafe(32))
    return f"{KEY_PREFIX}{parts.prefix}_{parts.secret}", parts


class KeyHasher:
    """HMAC-SHA256 of a key under the server secret; `matches` compares in constant time."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def load(cls, keys_dir: Path, configured: Path | None) -> KeyHasher:
        if configured is None:
            return cls(load_or_create_secret(keys_dir / SECRET_FILE_NAME))
        try:
            secret = configured.read_bytes().strip()
        except OSError as error:
            raise UserInputError(f"BERTH_KEY_HMAC_SECRET_FILE {configured} cannot be read "
                                 f"({error.strerror or type(error).__name__}); fix the path or unset it.") from None
        if not secret:
            raise UserInputError(f"BERTH_KEY_HMAC_SECRET_FILE {configured} is empty; put a random secret in it "
                                 "or unset it.")
        return cls(secret)

    def digest(self, key: PresentedKey) -> str:
        message = b"berth-api-key\0" + key.prefix.encode() + b"\0" + key.secret.encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def matches(self, key: PresentedKey, stored: str | None) -> bool:
        return stored is not None and hmac.compare_digest(self.digest(key), stored)


def model_refusal(key_id: str, key_model: str | None, requested: str | None) -> str | None:
    """Why a key scoped to one model may not ask for another (None: it may). A request naming no model
    (a listing) passes: the service answers it for the key's endpoint only."""
    if key_model is None or requested is None or requested == key_model:
        return None
    return f"API key {key_id} is for model '{key_model}' only, not '{requested[:128]}'."
