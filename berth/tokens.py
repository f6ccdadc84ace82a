"""API token lifetimes and the token registry's wire types, shared by the API, its client and `berth up`."""

from __future__ import annotations

import json
import re
import ssl
from enum import Enum
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from berth.contracts.base import DURATION_PATTERN
from berth.errors import UserInputError

# At most 9 digits: enough for any real lifetime in seconds, and no 60-digit integer reaches the signer.
DURATION = re.compile(r"^(\d{1,9})([smhdw])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> int:
    """Seconds in a duration like 30m, 8h or 7d; anything else is refused in one line (never echoed whole)."""
    match = DURATION.match(text.strip())
    if not match:
        shown = text if len(text) <= 32 else text[:32] + "…"
        raise UserInputError(f"Expiration '{shown}' is not a duration like 30m, 8h or 7d.")
    return int(match.group(1)) * UNITS[match.group(2)]


def capped_lifetime(text: str, cap_s: int, what: str, *, word: str = "Expiration", flag: str = "--expiration",
                    capped_by: str = "this cluster") -> int:
    """A positive duration no longer than the cap for `what` (e.g. "API tokens"), or one clear refusal
    naming who set the cap and the option to change."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise UserInputError(f"{word} '{text.strip()}' must be longer than zero.")
    if seconds > cap_s:
        raise UserInputError(f"{word} {text.strip()} is longer than {capped_by} allows for {what} "
                             f"({human_duration(cap_s)}). Choose a shorter {flag}.")
    return seconds


def human_duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class TokenKind(str, Enum):
    """Why an API token exists."""

    USER = "user"  # minted through the API (`berth login`)
    SERVICE = "service"  # minted for a workflow's service, speaking for its owner (≤ 7 days)
    STACK = "stack"  # the embedded stack's administrator token (`berth up`; rotated at each start)
    KEY_HOLDER = "key-holder"  # minted straight from the signing key (`berth admin-token`), seen on first use
    UNRECORDED = "unrecorded"  # issued before Berth recorded tokens; listed from its first use since


class TokenRecord(BaseModel):
    """One API token as `berth token list` shows it (never the token itself)."""

    id: str
    user: str
    kind: TokenKind
    note: str = ""
    created_at: float
    expires_at: float
    minted_by: str | None = None
    revoked_at: float | None = None
    revoked_by: str | None = None
    state: str = Field(description="active, expired or revoked")


class RevokeResult(BaseModel):
    revoked: list[str]  # token ids revoked now
    user: str | None = None
    note: str = ""


class RevokeBody(BaseModel):
    """RFC 7009 style: revoke the token you hold (no id needed)."""

    token: str = Field(max_length=4096)


class TokenMintBody(BaseModel):
    expiration: str = Field("8h", max_length=64, json_schema_extra={"pattern": DURATION_PATTERN})
    note: str = Field("", max_length=200)


def unverified_claims(token: str) -> dict[str, object]:
    """A token's claims without checking it: only to learn which id to revoke or record."""
    import jwt  # here, not at the top: PyJWT loads cryptography (~0.1 s), which most CLI commands never need

    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return {}
    return claims if isinstance(claims, dict) else {}


def previous_stack_token(client_config: Path) -> str | None:
    """The administrator token a previous `berth up` wrote to the state dir's client config."""
    try:
        token = json.loads(client_config.read_text()).get("token")
    except (OSError, ValueError, AttributeError):
        return None
    return token if isinstance(token, str) and token else None


def revoke_previous_stack_token(api_url: str, new_token: str, previous: str | None,
                                verify: ssl.SSLContext | bool = True) -> None:
    """`berth up` rotates its administrator token: the one it wrote last time stops working now.
    A previous token this cluster no longer accepts (other keys, expired) needs nothing."""
    if not previous or previous == new_token:
        return
    try:
        response = httpx.post(f"{api_url}/v1/tokens/revoke", json={"token": previous}, timeout=10, verify=verify,
                              headers={"Authorization": f"Bearer {new_token}"})
    except httpx.HTTPError as error:
        raise UserInputError(f"Could not revoke the previous administrator token ({type(error).__name__}); "
                             "run `berth up` again.") from None
    if response.status_code >= 500:
        raise UserInputError(f"Could not revoke the previous administrator token ({response.status_code}); "
                             "run `berth up` again.")
