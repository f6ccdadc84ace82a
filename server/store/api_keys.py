"""API keys in the store: create, list, show, rotate and revoke them; verify a presented `bk_…` key (by
prefix, constant-time HMAC compare); and reserve requests of a key's lifetime quota atomically (one
conditional UPDATE, so API replicas sharing a store never grant past the quota)."""

from __future__ import annotations

import secrets
import time

from sqlalchemy import select, update

from berth.api_keys import KeyHasher, PresentedKey, model_refusal, new_key, parse_key
from berth.contracts import IssuedKey, KeyCreateRequest, KeyLimits, KeyRecord, KeyReservation, KeyVerdict
from berth.errors import AuthenticationError, NotFoundError, PermissionDeniedError, UserInputError
from berth.security import Identity
from berth.tokens import capped_lifetime, parse_duration
from server.store.database import Store
from server.store.tables import ApiKeyRow, EndpointRow

LIST_LIMIT = 1000  # `berth key list` shows the newest this many
DEFAULT_TTL_S = 30 * 86400  # no --ttl: 30 days, or the endpoint's cap when that is shorter
MAX_OVERLAP_S = 7 * 24 * 3600  # a rotation leaves two secrets working; for days at most


def ttl_cap_s(endpoint: EndpointRow, cluster_cap: str) -> tuple[int, str]:
    """The longest key lifetime for this endpoint, and where that cap comes from: the cluster's
    `key_max_ttl`, or the endpoint's `key_max_ttl` annotation when that is shorter."""
    cap, source = parse_duration(cluster_cap), "this cluster (key_max_ttl)"
    annotated = (endpoint.annotations or {}).get("key_max_ttl")
    if isinstance(annotated, str | int) and not isinstance(annotated, bool):
        seconds = annotated if isinstance(annotated, int) else parse_duration(annotated)
        if seconds < cap:
            cap, source = seconds, f"endpoint {endpoint.id}"
    return cap, source


def key_lifetime_s(ttl: str | None, endpoint: EndpointRow, cluster_cap: str) -> int:
    """The asked lifetime (None: the default), refused in one line when longer than the cap."""
    cap, source = ttl_cap_s(endpoint, cluster_cap)
    if ttl is None:
        return min(DEFAULT_TTL_S, cap)
    return capped_lifetime(ttl, cap, "API keys", word="TTL", flag="--ttl", capped_by=source)


def _state(row: ApiKeyRow, now: float) -> str:
    if row.revoked_at is not None:
        return "revoked"
    return "expired" if row.expires_at is not None and row.expires_at <= now else "active"


def _limits(row: ApiKeyRow) -> KeyLimits:
    return KeyLimits(request_quota=row.request_quota, requests_used=row.requests_used,
                     tokens_per_minute=row.tokens_per_minute, max_concurrent=row.max_concurrent)


def record(row: ApiKeyRow, now: float | None = None) -> KeyRecord:
    now = time.time() if now is None else now
    overlap = row.previous_valid_until if row.previous_valid_until and row.previous_valid_until > now else None
    return KeyRecord(id=row.id, prefix=row.prefix, name=row.name, owner=row.owner, org=row.org,
                     groups=list(row.groups or []), endpoint_id=row.endpoint_id, model=row.model,
                     created_at=row.created_at, expires_at=row.expires_at, revoked_at=row.revoked_at,
                     previous_valid_until=overlap, limits=_limits(row), state=_state(row, now))


class ApiKeys:
    def __init__(self, store: Store, hasher: KeyHasher) -> None:
        self.store = store
        self.hasher = hasher

    # --- issuing and managing -------------------------------------------------------------------
    def create(self, who: Identity, body: KeyCreateRequest, ttl_s: int) -> IssuedKey:
        plaintext, parts = new_key()
        now = time.time()
        row = ApiKeyRow(id=f"key-{secrets.token_hex(6)}", prefix=parts.prefix, name=body.name, owner=who.user,
                        org=who.org, groups=list(who.groups), endpoint_id=body.endpoint_id, model=body.model,
                        created_at=now, expires_at=now + ttl_s, hash=self.hasher.digest(parts),
                        request_quota=body.request_quota, requests_used=0,
                        tokens_per_minute=body.tokens_per_minute, max_concurrent=body.max_concurrent)
        with self.store.session() as s:
            s.add(row)
            s.flush()
            return IssuedKey(key=plaintext, record=record(row, now))

    def records(self, who: Identity) -> list[KeyRecord]:
        """The caller's keys (an administrator: everyone's), oldest first."""
        with self.store.session() as s:
            query = select(ApiKeyRow).order_by(ApiKeyRow.created_at.desc()).limit(LIST_LIMIT)
            rows = s.scalars(query if who.admin else query.where(ApiKeyRow.owner == who.user)).all()[::-1]
            now = time.time()
            return [record(row, now) for row in rows]

    def owned(self, who: Identity, key_id: str) -> KeyRecord:
        """The key if the caller created it (or is an administrator); to anyone else it does not exist."""
        with self.store.session() as s:
            row = s.get(ApiKeyRow, key_id)
            if row is None or (row.owner != who.user and not who.admin):
                raise NotFoundError(f"No API key with id '{key_id[:64]}'. `berth key list` shows yours.")
            return record(row)

    def rotate(self, key_id: str, overlap_s: int) -> IssuedKey:
        """A new secret for the key (same id and prefix); the current one keeps working `overlap_s`."""
        now = time.time()
        with self.store.session() as s:
            row = s.get(ApiKeyRow, key_id)
            if row is None or _state(row, now) != "active":
                raise UserInputError(f"API key {key_id} is {'gone' if row is None else _state(row, now)}; "
                                     "only an active key can be rotated.")
            plaintext, parts = new_key(row.prefix)
            row.previous_hash, row.previous_valid_until = row.hash, now + overlap_s
            row.hash = self.hasher.digest(parts)
            s.flush()
            return IssuedKey(key=plaintext, record=record(row, now))

    def revoke(self, key_id: str) -> KeyRecord:
        with self.store.session() as s:
            row = s.get(ApiKeyRow, key_id)
            if row is None:
                raise NotFoundError(f"No API key with id '{key_id[:64]}'.")
            if row.revoked_at is None:
                row.revoked_at = time.time()
            s.flush()
            return record(row)

    # --- the endpoint proxy's checks ------------------------------------------------------------
    def verify(self, presented: str, endpoint_id: str, model: str | None) -> KeyVerdict:
        """Who a presented key speaks for on `endpoint_id`: unknown, revoked or expired → 401; a key for
        another endpoint or model → 403 naming the one it is for."""
        parts = parse_key(presented)
        if parts is None:
            raise AuthenticationError("Not a Berth API key (they look like bk_<prefix>_<secret>).")
        now = time.time()
        with self.store.session() as s:
            row = s.scalars(select(ApiKeyRow).where(ApiKeyRow.prefix == parts.prefix)).one_or_none()
            valid_until = self._secret_valid_until(row, parts, now)
            assert row is not None  # _secret_valid_until refused an unknown key
            if row.endpoint_id != endpoint_id:
                raise PermissionDeniedError(f"API key {row.id} is for endpoint {row.endpoint_id}, "
                                            f"not {endpoint_id[:64]}.")
            refusal = model_refusal(row.id, row.model, model)
            if refusal:
                raise PermissionDeniedError(refusal)
            return KeyVerdict(key_id=row.id, owner=row.owner, org=row.org, groups=list(row.groups or []),
                              endpoint_id=row.endpoint_id, model=row.model, valid_until=valid_until,
                              limits=_limits(row))

    def _secret_valid_until(self, row: ApiKeyRow | None, parts: PresentedKey, now: float) -> float | None:
        if row is None:
            self.hasher.digest(parts)  # the same work as a known prefix: timing tells nothing
            raise AuthenticationError("Unknown API key.")
        if self.hasher.matches(parts, row.hash):
            until = row.expires_at
        elif (row.previous_valid_until is not None and row.previous_valid_until > now
              and self.hasher.matches(parts, row.previous_hash)):
            until = min(row.previous_valid_until, row.expires_at or row.previous_valid_until)
        else:
            raise AuthenticationError(f"API key {row.id} was rotated or is wrong: use its current secret.")
        if row.revoked_at is not None:
            raise AuthenticationError(f"API key {row.id} is revoked.")
        if row.expires_at is not None and row.expires_at <= now:
            raise AuthenticationError(f"API key {row.id} expired; create a new one (`berth key create`).")
        return until

    def reserve(self, key_id: str, wanted: int) -> KeyReservation:
        """Reserve `wanted` requests of the key's quota (or one, when fewer than `wanted` are left): each
        a conditional UPDATE, atomic on SQLite and PostgreSQL alike, so nothing is granted twice."""
        with self.store.session() as s:
            row = s.get(ApiKeyRow, key_id)
            if row is None:
                raise NotFoundError(f"No API key with id '{key_id[:64]}'.")
            if row.request_quota is None:
                return KeyReservation(key_id=key_id, granted=wanted, remaining=None)
        granted = 0
        for amount in dict.fromkeys((wanted, 1)):
            with self.store.session() as s:
                done = s.execute(update(ApiKeyRow)
                                 .where(ApiKeyRow.id == key_id,
                                        ApiKeyRow.requests_used + amount <= ApiKeyRow.request_quota)
                                 .values(requests_used=ApiKeyRow.requests_used + amount)
                                 .execution_options(synchronize_session=False))
            if done.rowcount:  # type: ignore[attr-defined]
                granted = amount
                break
        with self.store.session() as s:
            row = s.get(ApiKeyRow, key_id)
            remaining = max(0, (row.request_quota or 0) - row.requests_used) if row is not None else 0
        return KeyReservation(key_id=key_id, granted=granted, remaining=remaining)
