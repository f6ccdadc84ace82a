"""Users, groups and what proves who a caller is: API tokens and their cut-offs, endpoint tokens, API keys, secrets."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from server.store.tables.base import Base


class UserRow(Base):
    __tablename__ = "users"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    org: Mapped[str] = mapped_column(String(128))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class GroupRow(Base):
    __tablename__ = "groups"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    org: Mapped[str] = mapped_column(String(128))


class MembershipRow(Base):
    __tablename__ = "memberships"
    user: Mapped[str] = mapped_column(String(128), primary_key=True)
    group: Mapped[str] = mapped_column(String(128), primary_key=True)


class SecretRow(Base):
    __tablename__ = "secrets"
    ref: Mapped[str] = mapped_column(String(300), primary_key=True)  # secret://user/alice/NAME form
    scope: Mapped[str] = mapped_column(String(32))
    owner: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128))
    type: Mapped[str] = mapped_column(String(32))
    ciphertext: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    # Who may change or delete a shared (group/organization) secret besides an administrator. None on
    # rows made before Berth recorded it: only an administrator may change those.
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class ApiTokenRow(Base):
    """An API token Berth issued or saw (by its `jti`, never the token), and whether it was revoked."""

    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(128), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    note: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    minted_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    revoked_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class TokenCutoffRow(Base):
    """`berth token revoke --all --user NAME`: every API token of the user issued before `not_before`
    is refused, recorded or not."""

    __tablename__ = "token_cutoffs"
    user: Mapped[str] = mapped_column(String(128), primary_key=True)
    not_before: Mapped[float] = mapped_column(Float)
    by: Mapped[str] = mapped_column(String(128))


class EndpointTokenRow(Base):
    """An endpoint token Berth minted (by its `jti`, never the token): whom it names, who asked for it, and
    whether it was revoked (server/store/endpoint_tokens.py). The endpoint proxies learn the revoked ids of
    unexpired tokens from the routes table; a row is dropped a day after its token expired."""

    __tablename__ = "endpoint_tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(String(64), index=True)
    user: Mapped[str] = mapped_column(String(128))  # whom the token names (its `sub`)
    minted_by: Mapped[str] = mapped_column(String(128))  # who asked for it: the user, or a service's minter
    note: Mapped[str] = mapped_column(String(200), default="")
    minted_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    revoked_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class ApiKeyRow(Base):
    """A Berth API key (`bk_<prefix>_<secret>`): found by its prefix, checked against `hash` (HMAC-SHA256
    hex under the server secret, never the key); after a rotation the previous secret's hash works until
    `previous_valid_until`. The creator's identity is copied in: the key speaks for them."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    prefix: Mapped[str] = mapped_column(String(32), unique=True, index=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(128), index=True)
    org: Mapped[str] = mapped_column(String(128))
    groups: Mapped[list[str]] = mapped_column(JSON, default=list)
    endpoint_id: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    hash: Mapped[str] = mapped_column(String(64))
    previous_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    previous_valid_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    request_quota: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    requests_used: Mapped[int] = mapped_column(BigInteger, default=0)
    tokens_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_concurrent: Mapped[int | None] = mapped_column(Integer, nullable=True)
