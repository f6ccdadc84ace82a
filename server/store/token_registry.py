"""The API token registry: which tokens were issued (by id, never the token), which are revoked, and a
short-lived in-memory copy of the revocations so that checking each request costs no query."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from berth.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from berth.security import Identity
from berth.tokens import RevokeResult, TokenKind, TokenRecord
from server.store.database import Store
from server.store.tables import ApiTokenRow, TokenCutoffRow

KNOWN_LIMIT = 100_000  # token ids remembered as recorded; past it the memory starts afresh
LIST_LIMIT = 1000  # `berth token list` shows the newest this many


def _kind(claims: dict[str, Any]) -> str:
    use = claims.get("use")
    return use if use in {k.value for k in TokenKind} else TokenKind.UNRECORDED.value


class TokenRegistry:
    def __init__(self, store: Store, refresh_s: float) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self._revoked: set[str] = set()
        self._cutoffs: dict[str, float] = {}
        self._known: set[str] = set()
        self._loaded_at = -math.inf
        self._lock = asyncio.Lock()

    # --- the check on every API request ---------------------------------------------------------
    def refusal(self, claims: dict[str, Any]) -> str | None:
        """Why this (signature-checked, unexpired) API token is refused, from the cached revocations."""
        if str(claims.get("jti", "")) in self._revoked:
            return "Token revoked: ask an administrator for a new one (`berth login --user NAME`)."
        cutoff = self._cutoffs.get(str(claims.get("sub", "")))
        if cutoff is not None and float(claims.get("iat", 0)) < cutoff:
            return ("Token revoked (every token of this user issued before "
                    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(cutoff))} was): ask an administrator "
                    "for a new one.")
        return None

    async def admit(self, claims: dict[str, Any]) -> None:
        """Refuse a revoked token; remember a token never seen before (one minted from the signing key)."""
        if time.monotonic() - self._loaded_at > self.refresh_s:
            async with self._lock:
                if time.monotonic() - self._loaded_at > self.refresh_s:
                    await run_in_threadpool(self.load)
        reason = self.refusal(claims)
        if reason:
            raise AuthenticationError(reason)
        if claims.get("jti") and claims["jti"] not in self._known:
            await run_in_threadpool(self.record, claims, _kind(claims), str(claims.get("note", ""))[:200], None)

    def load(self) -> None:
        now = time.time()
        with self.store.session() as s:
            revoked = s.scalars(select(ApiTokenRow.id).where(ApiTokenRow.revoked_at.is_not(None),
                                                             ApiTokenRow.expires_at > now)).all()
            cutoffs = {row.user: row.not_before for row in s.scalars(select(TokenCutoffRow))}
        self._revoked, self._cutoffs = set(revoked), cutoffs
        self._loaded_at = time.monotonic()

    # --- issuing --------------------------------------------------------------------------------
    def record(self, claims: dict[str, Any], kind: str, note: str, minted_by: str | None) -> None:
        token_id = str(claims["jti"])
        # Concurrent first requests with one token each try to record it: the first insert wins.
        with contextlib.suppress(IntegrityError), self.store.session() as s:
            if s.get(ApiTokenRow, token_id) is None:
                s.add(ApiTokenRow(id=token_id, user=str(claims["sub"]), kind=kind, note=note,
                                  created_at=float(claims.get("iat", time.time())),
                                  expires_at=float(claims["exp"]), minted_by=minted_by))
        if len(self._known) > KNOWN_LIMIT:
            self._known.clear()
        self._known.add(token_id)

    # --- listing and revoking -------------------------------------------------------------------
    def records(self, who: Identity, user: str | None) -> list[TokenRecord]:
        if user is not None and user != who.user and not who.admin:
            raise PermissionDeniedError("Only administrators may list another user's tokens.")
        subject = user if user is not None else (None if who.admin else who.user)
        now = time.time()
        with self.store.session() as s:
            query = select(ApiTokenRow).order_by(ApiTokenRow.created_at.desc()).limit(LIST_LIMIT)
            rows = s.scalars(query if subject is None else query.where(ApiTokenRow.user == subject)).all()[::-1]
            cutoffs = {row.user: row.not_before for row in s.scalars(select(TokenCutoffRow))}
        return [self._record(row, cutoffs.get(row.user), now) for row in rows]

    @staticmethod
    def _record(row: ApiTokenRow, cutoff: float | None, now: float) -> TokenRecord:
        revoked = row.revoked_at is not None or (cutoff is not None and row.created_at < cutoff)
        state = "revoked" if revoked else "expired" if row.expires_at <= now else "active"
        return TokenRecord(id=row.id, user=row.user, kind=TokenKind(row.kind), note=row.note,
                           created_at=row.created_at, expires_at=row.expires_at, minted_by=row.minted_by,
                           revoked_at=row.revoked_at if row.revoked_at is not None else cutoff if revoked else None,
                           revoked_by=row.revoked_by, state=state)

    def revoke(self, who: Identity, token_id: str) -> RevokeResult:
        with self.store.session() as s:
            row = s.get(ApiTokenRow, token_id)
            if row is None or (row.user != who.user and not who.admin):
                raise NotFoundError(f"No token with id '{token_id[:64]}'. `berth token list` shows yours.")
            if row.revoked_at is None:
                row.revoked_at, row.revoked_by = time.time(), who.user
            user = row.user
        self._revoked.add(token_id)
        return RevokeResult(revoked=[token_id], user=user)

    def revoke_presented(self, who: Identity, claims: dict[str, Any]) -> RevokeResult:
        """Revoke a token its holder presents (RFC 7009 style); recorded first if it never was."""
        if str(claims["sub"]) != who.user and not who.admin:
            raise PermissionDeniedError("Only the token's own user or an administrator may revoke it.")
        self.record(claims, _kind(claims), str(claims.get("note", ""))[:200], None)
        return self.revoke(who, str(claims["jti"]))

    def revoke_all(self, who: Identity, user: str) -> RevokeResult:
        if user != who.user and not who.admin:
            raise PermissionDeniedError("Only administrators may revoke another user's tokens.")
        self.store.identity(user)  # an unknown user is a typo, not a silent success
        now = time.time()
        with self.store.session() as s:
            rows = s.scalars(select(ApiTokenRow).where(ApiTokenRow.user == user, ApiTokenRow.revoked_at.is_(None),
                                                       ApiTokenRow.expires_at > now)).all()
            for row in rows:
                row.revoked_at, row.revoked_by = now, who.user
            revoked = [row.id for row in rows]
            cutoff = s.get(TokenCutoffRow, user)
            # Whole seconds: a token's `iat` is one, so one minted later in this second stays good.
            not_before = float(int(now))
            if cutoff is None:
                s.add(TokenCutoffRow(user=user, not_before=not_before, by=who.user))
            else:
                cutoff.not_before, cutoff.by = not_before, who.user
        self._revoked.update(revoked)
        self._cutoffs[user] = not_before
        return RevokeResult(revoked=revoked, user=user,
                            note=f"every API token of {user} issued before now is refused, listed or not")
