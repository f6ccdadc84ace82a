"""A rollout's traffic in the store: the endpoint's split (its `traffic` annotation) and how each copy
answered the endpoint proxies (one row per copy per load report, kept an hour), summed per revision."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from berth.contracts import CopyOutcomes, RevisionHealth
from berth.errors import NotFoundError, UserInputError
from server.store.tables import CopyOutcomeRow, EndpointRow, ReplicaRow

KEEP_S = 3600.0  # a canary's hold is minutes; an hour covers any step with room to spare
MAX_REVISIONS = 8


def validated(weights: dict[int, int] | None) -> dict[int, int] | None:
    """The split as stored, or UserInputError in one line saying what is wrong."""
    if weights is None:
        return None
    if not weights or len(weights) > MAX_REVISIONS:
        raise UserInputError(f"A traffic split names 1 to {MAX_REVISIONS} revisions, not {len(weights)}.")
    if any(revision < 1 for revision in weights):
        raise UserInputError("A traffic split's revisions are numbered from 1.")
    if any(not 0 <= percent <= 100 for percent in weights.values()):
        raise UserInputError("A traffic split's percents are each 0 to 100.")
    if sum(weights.values()) != 100:
        raise UserInputError(f"A traffic split's percents sum to 100, not {sum(weights.values())}.")
    return dict(weights)


def traffic_of(annotations: Mapping[str, Any]) -> dict[int, int] | None:
    """The endpoint's split as its annotation holds it (JSON keys are strings); None: none set."""
    raw = annotations.get("traffic")
    if not isinstance(raw, dict) or not raw:
        return None
    return {int(revision): int(percent) for revision, percent in raw.items()}


class CopyOutcomeStore:
    def __init__(self, session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._session = session

    def set_traffic(self, endpoint_id: str, weights: dict[int, int] | None) -> None:
        split = validated(weights)
        with self._session() as s:
            row = s.get(EndpointRow, endpoint_id)
            if row is None:
                raise NotFoundError(f"No endpoint with ID '{endpoint_id}'.")
            annotations = {k: v for k, v in (row.annotations or {}).items() if k != "traffic"}
            if split is not None:
                annotations["traffic"] = {str(revision): percent for revision, percent in split.items()}
            row.annotations = annotations

    def add(self, endpoint_id: str, copies: Mapping[str, CopyOutcomes], now: float | None = None) -> None:
        """One row per reported copy, with the revision its replica row says (a copy gone meanwhile: 1)."""
        if not copies:
            return
        now = time.time() if now is None else now
        with self._session() as s:
            revisions = dict(s.execute(select(ReplicaRow.copy_id, ReplicaRow.revision)
                                       .where(ReplicaRow.copy_id.in_(list(copies)))).all())
            for copy_id, outcome in copies.items():
                s.add(CopyOutcomeRow(endpoint_id=endpoint_id, copy_id=copy_id, revision=revisions.get(copy_id, 1),
                                     at=now, requests=outcome.requests, errors=outcome.errors,
                                     ttft_sum_s=outcome.ttft_sum_s, ttft_count=outcome.ttft_count))
            s.execute(delete(CopyOutcomeRow).where(CopyOutcomeRow.at < now - KEEP_S))  # bounded

    def health(self, endpoint_id: str, revision: int, since: float) -> RevisionHealth:
        with self._session() as s:
            requests, errors, ttft_sum, ttft_count, copies = s.execute(
                select(func.coalesce(func.sum(CopyOutcomeRow.requests), 0),
                       func.coalesce(func.sum(CopyOutcomeRow.errors), 0),
                       func.coalesce(func.sum(CopyOutcomeRow.ttft_sum_s), 0.0),
                       func.coalesce(func.sum(CopyOutcomeRow.ttft_count), 0),
                       func.count(func.distinct(CopyOutcomeRow.copy_id)))
                .where(CopyOutcomeRow.endpoint_id == endpoint_id, CopyOutcomeRow.revision == revision,
                       CopyOutcomeRow.at >= since)).one()
        return RevisionHealth(revision=revision, requests=int(requests), errors=int(errors),
                              error_rate=errors / requests if requests else 0.0,
                              ttft_ms=1000.0 * ttft_sum / ttft_count if ttft_count else None, copies=int(copies))

    def forget(self, s: Session, endpoint_id: str) -> None:
        s.execute(delete(CopyOutcomeRow).where(CopyOutcomeRow.endpoint_id == endpoint_id))
