"""Endpoint tokens in the store: each one minted is recorded (its id, never the token), listed to those who
may see it, and revoked by id; the routes table carries each endpoint's revoked ids to the endpoint proxies,
which verify tokens offline and so learn of a revocation only from there.

Who sees and revokes which: the endpoint's owner and administrators every token of the endpoint; anyone
else (inside its scope: server/guards.py) the tokens that name them or that they asked for, as `berth token
list` shows API tokens. A token outside that is answered as unknown (404), as the API token registry does."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import delete, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from berth.contracts import EndpointTokenRecord, EndpointTokenRevoked
from berth.errors import NotFoundError
from berth.security import Identity
from server.store.tables import EndpointRow, EndpointTokenRow

LIST_LIMIT = 1000  # `berth endpoint tokens` shows the newest this many
# An expired token's row is kept this long (its revocation no longer matters: `exp` refuses it), then dropped
# when the next token is minted, so the table holds the live tokens and a day's worth of the rest.
KEEP_EXPIRED_S = 24 * 3600.0
MAX_ID_SHOWN = 64  # a refusal quotes at most this much of an id the caller typed


class EndpointTokens:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session

    def record(self, claims: dict[str, Any], endpoint_id: str, minted_by: str, note: str = "") -> None:
        """Record a token just minted, from its verified claims."""
        now = time.time()
        # The same token recorded twice (a retried mint cannot, but a caller might): the first insert wins.
        with contextlib.suppress(IntegrityError), self._session() as s:
            s.execute(delete(EndpointTokenRow).where(EndpointTokenRow.expires_at < now - KEEP_EXPIRED_S))
            s.add(EndpointTokenRow(id=str(claims["jti"]), endpoint_id=endpoint_id, user=str(claims["sub"]),
                                   minted_by=minted_by, note=note[:200],
                                   # The clock's, not the claims' whole-second `iat`: tokens minted in one
                                   # second still list in the order they were minted.
                                   minted_at=now, expires_at=float(claims["exp"])))

    def records(self, endpoint: EndpointRow, who: Identity) -> list[EndpointTokenRecord]:
        """The endpoint's unexpired tokens the caller may see, oldest first."""
        query = (select(EndpointTokenRow)
                 .where(EndpointTokenRow.endpoint_id == endpoint.id, EndpointTokenRow.expires_at > time.time())
                 .order_by(EndpointTokenRow.minted_at.desc()).limit(LIST_LIMIT))
        if not _sees_all(endpoint, who):
            query = query.where(or_(EndpointTokenRow.user == who.user, EndpointTokenRow.minted_by == who.user))
        with self._session() as s:
            rows = s.scalars(query).all()[::-1]
        return [_record(row) for row in rows]

    def revoke(self, endpoint: EndpointRow, who: Identity, token_id: str) -> EndpointTokenRevoked:
        """Revoke one token of the endpoint; revoking it again changes nothing and says so."""
        with self._session() as s:
            row = s.get(EndpointTokenRow, token_id)
            mine = row is not None and who.user in (row.user, row.minted_by)
            if row is None or row.endpoint_id != endpoint.id or not (mine or _sees_all(endpoint, who)):
                raise NotFoundError(f"No token with id '{token_id[:MAX_ID_SHOWN]}' for endpoint {endpoint.id}. "
                                    f"`berth endpoint tokens {endpoint.id}` lists them.")
            already = row.revoked_at is not None
            if not already:
                row.revoked_at, row.revoked_by = time.time(), who.user
            return EndpointTokenRevoked(record=_record(row), already_revoked=already)

    def revoked_ids(self) -> dict[str, list[str]]:
        """endpoint id → the ids of its revoked tokens not yet expired (what the routes table carries)."""
        query = (select(EndpointTokenRow.endpoint_id, EndpointTokenRow.id)
                 .where(EndpointTokenRow.revoked_at.is_not(None), EndpointTokenRow.expires_at > time.time())
                 .order_by(EndpointTokenRow.endpoint_id, EndpointTokenRow.id))
        revoked: dict[str, list[str]] = {}
        with self._session() as s:
            for endpoint_id, token_id in s.execute(query).all():
                revoked.setdefault(endpoint_id, []).append(token_id)
        return revoked


def _sees_all(endpoint: EndpointRow, who: Identity) -> bool:
    return who.admin or who.user == endpoint.owner


def _record(row: EndpointTokenRow) -> EndpointTokenRecord:
    return EndpointTokenRecord(id=row.id, endpoint_id=row.endpoint_id, user=row.user, minted_by=row.minted_by,
                               minted_at=row.minted_at, expires_at=row.expires_at, note=row.note,
                               revoked=row.revoked_at is not None, revoked_at=row.revoked_at,
                               revoked_by=row.revoked_by)
