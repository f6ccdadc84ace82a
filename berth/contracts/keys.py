"""API key answers and requests: a key's record (never its hash), the plaintext shown once at create and
rotate, and what the endpoint proxy asks and learns when a caller presents a `bk_…` key."""

from __future__ import annotations

from pydantic import Field

from berth.contracts.base import Payload, Response


class KeyLimits(Response):
    """Per-key limits; None: off. `requests_used` counts the requests reserved against the quota."""

    request_quota: int | None = None
    requests_used: int = 0
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None


class KeyRequests(Response):
    """What a key was used for, as the audit chain records every request (a quota or not): requests made,
    and those answered with a status below 400."""

    made: int = 0
    answered: int = 0


class KeyRecord(Response):
    """One key as `berth key list|describe` shows it."""

    id: str
    prefix: str
    name: str
    owner: str
    org: str
    groups: list[str]
    endpoint_id: str
    model: str | None = None
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    previous_valid_until: float | None = None  # the secret before the last rotation works until then
    limits: KeyLimits
    state: str = Field(description="active, expired or revoked")
    requests: KeyRequests | None = Field(default=None, description="`describe` only: what the key was used for, "
                                         "from the audit chain (recorded within seconds of each request)")


class IssuedKey(Response):
    """A key's plaintext, shown once (create, rotate), and its record."""

    key: str = Field(repr=False)
    record: KeyRecord


class KeyVerdict(Response):
    """Who a presented key speaks for and its limits, for the endpoint proxy; `valid_until` is when the
    secret presented stops working (expiry or the end of a rotation's overlap), None: no end."""

    key_id: str
    owner: str
    org: str
    groups: list[str]
    endpoint_id: str
    model: str | None = None
    valid_until: float | None = None
    limits: KeyLimits


class KeyReservation(Response):
    """Requests of a key's lifetime quota reserved now (0: exhausted), and what is left after them."""

    key_id: str
    granted: int
    remaining: int | None = None


# --- requests ------------------------------------------------------------------------------------------
class KeyCreateRequest(Payload):
    name: str = Field(min_length=1, max_length=128)
    endpoint_id: str = Field(min_length=1, max_length=64)
    model: str | None = Field(None, max_length=256)
    ttl: str | None = Field(None, max_length=64, description="A duration like 30d or 12h; null: 30d, or the "
                            "endpoint's cap when shorter")
    request_quota: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    max_concurrent: int | None = Field(None, ge=1)


class KeyRotateRequest(Payload):
    overlap: str = Field("1h", max_length=64, description="How long the current secret keeps working")


class KeyVerifyRequest(Payload):
    key: str = Field(max_length=256, repr=False)
    endpoint_id: str = Field(max_length=64)
    model: str | None = Field(None, max_length=256)


class KeyReserveRequest(Payload):
    requests: int = Field(1, ge=1, le=10_000)
