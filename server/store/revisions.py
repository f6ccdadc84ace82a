"""A workflow's revisions in the store (issue 17): revision 1 is its start, each update writes the next.
The rendered definition and the values are encrypted at rest like WorkflowRow.definition (either may hold a
key or a password);
a workflow started before revisions existed has no rows, and reads as a revision 1 made from its row."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from berth.contracts import PoolFacts
from berth.security import Cipher
from server.store.tables import EndpointRow, RevisionRow, WorkflowRow


class Revision(BaseModel):
    """One revision as read back: its definition decrypted, its values as given."""

    workflow_id: str
    revision: int
    definition: dict[str, Any]
    values: dict[str, Any]
    by: str
    at: float
    strategy: dict[str, Any] = {}


class Revisions:
    """`store.revisions`: write and read a workflow's revisions."""

    def __init__(self, session: Callable[[], AbstractContextManager[Session]], cipher: Cipher) -> None:
        self._session = session
        self._cipher = cipher

    def add_revision(self, workflow_id: str, revision: int, definition: dict[str, Any], values: dict[str, Any],
                     by: str, strategy: dict[str, Any] | None = None) -> None:
        row = RevisionRow(workflow_id=workflow_id, revision=revision, definition=self._cipher.encrypt_json(definition),
                          values=self._cipher.encrypt_json(values), by=by, at=time.time(), strategy=strategy or {})
        with self._session() as s:
            s.add(row)

    def revisions(self, workflow: WorkflowRow) -> list[Revision]:
        """Every revision, oldest first; a revision 1 made from the workflow's row where none was written."""
        with self._session() as s:
            rows = list(s.scalars(select(RevisionRow).where(RevisionRow.workflow_id == workflow.id)
                                  .order_by(RevisionRow.revision)).all())
        if not rows:
            return [self._synthesized(workflow)]
        return [self._read(row) for row in rows]

    def revision(self, workflow: WorkflowRow, revision: int) -> Revision | None:
        return next((r for r in self.revisions(workflow) if r.revision == revision), None)

    def latest(self, workflow: WorkflowRow) -> Revision:
        return self.revisions(workflow)[-1]

    def serve(self, workflow: WorkflowRow, revision: int, facts: PoolFacts) -> None:
        """Revision `revision` now serves: its pool's facts replace the endpoint's (routing policy, sizes,
        autoscaling, MaxContextSize), whatever else the annotations hold staying as it is."""
        with self._session() as s:
            row = s.get(EndpointRow, workflow.endpoint_id)
            if row is not None:
                row.annotations = {**(row.annotations or {}), **facts.as_annotations()}

    def _read(self, row: RevisionRow) -> Revision:
        definition = self._cipher.decrypt_json(row.definition)
        assert isinstance(definition, dict)
        return Revision(workflow_id=row.workflow_id, revision=row.revision, definition=definition,
                        values=self._values(row.values), by=row.by, at=row.at,
                        strategy=row.strategy or {})

    def _synthesized(self, workflow: WorkflowRow) -> Revision:
        definition = self._cipher.decrypt_json(workflow.definition)
        assert isinstance(definition, dict)
        return Revision(workflow_id=workflow.id, revision=1, definition=definition,
                        values=_plain_values(workflow.values), by=workflow.owner, at=workflow.created_at)

    def _values(self, stored: str) -> dict[str, Any]:
        if not stored:
            return {}
        values = self._cipher.decrypt_json(stored)
        return values if isinstance(values, dict) else {}


def _plain_values(stored: str) -> dict[str, Any]:
    """A WorkflowRow's values column (JSON where written at all; empty on most rows)."""
    try:
        values = json.loads(stored) if stored else {}
    except ValueError:
        return {}
    return values if isinstance(values, dict) else {}
