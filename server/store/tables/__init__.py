"""The control plane's SQL tables (SQLAlchemy 2 ORM; SQLite by default, Postgres when several hosts), one module
per room of the store, every table re-exported here: `from server.store.tables import NodeRow`, and importing the
package registers every table on `Base.metadata`.

A change here is also a new revision in server/store/migrations/versions/ (the store opens at its head);
tests/server/store/test_migrations.py fails while the two disagree."""

from __future__ import annotations

from server.store.tables.base import Base
from server.store.tables.identity import (
    ApiKeyRow,
    ApiTokenRow,
    EndpointTokenRow,
    GroupRow,
    MembershipRow,
    SecretRow,
    TokenCutoffRow,
    UserRow,
)
from server.store.tables.models import (
    ModelRow,
    ModelUseRow,
)
from server.store.tables.operations import (
    AuditBatchRow,
    AuditTallyRow,
    CopySpanRow,
    EventRow,
    PolicyRow,
    UsageAlertRow,
    UsageBudgetRow,
)
from server.store.tables.placement import (
    AllocationRow,
    MigSliceRow,
    NodeRow,
    PortRow,
    ReservationRow,
    StoreLockRow,
)
from server.store.tables.workflows import (
    CopyOutcomeRow,
    CopyScrapeRow,
    EndpointRow,
    LoadReportRow,
    ReadyCopySampleRow,
    ReplicaRow,
    RevisionRow,
    WorkflowRow,
)

__all__ = [
    "Base",
    "AllocationRow",
    "ApiKeyRow",
    "ApiTokenRow",
    "AuditBatchRow",
    "AuditTallyRow",
    "CopyOutcomeRow",
    "CopyScrapeRow",
    "CopySpanRow",
    "EndpointRow",
    "EndpointTokenRow",
    "EventRow",
    "GroupRow",
    "LoadReportRow",
    "MigSliceRow",
    "MembershipRow",
    "ModelRow",
    "ModelUseRow",
    "NodeRow",
    "PolicyRow",
    "PortRow",
    "ReadyCopySampleRow",
    "ReplicaRow",
    "ReservationRow",
    "RevisionRow",
    "SecretRow",
    "StoreLockRow",
    "TokenCutoffRow",
    "UsageAlertRow",
    "UsageBudgetRow",
    "UserRow",
    "WorkflowRow",
]
