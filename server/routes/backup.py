"""Backup and restore routes, administrators only: `GET /v1/admin/backup`, the control plane's desired state as one
versioned document (never a plaintext secret, key or token); `POST /v1/admin/restore`, that document into an empty
control plane, its workflows started again under their IDs and endpoints (docs/backup.md)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import BackupDocument, BackupRestored, EventKind
from server.backup import make_backup, restore
from server.context import Context
from server.events import Audience, EventDraft, record
from server.guards import Admin
from server.refusals import refusals

router = APIRouter()
log = logging.getLogger(__name__)


@router.get("/v1/admin/backup")
async def backup(context: Context, who: Admin) -> BackupDocument:
    """The desired state: users, groups, workflows with their revisions, endpoints, secrets (still encrypted), the
    token registry, API keys (their hashes) and model records; not nodes, placements, copies, the audit chain or
    the cluster's events (history, not desired state)."""
    document = await run_in_threadpool(make_backup, context)
    await run_in_threadpool(record, context.store, EventDraft(
        EventKind.ADMIN_BACKUP, f"{who.user} took a backup", audience=Audience.of_user(who), actor=who.user))
    return document


# 400: made under other keys; 409: this control plane is not empty; 503: Temporal is unreachable (nothing written).
@router.post("/v1/admin/restore", responses=refusals(409, 503))
async def restore_backup(document: BackupDocument, context: Context, who: Admin) -> BackupRestored:
    """Restore a backup into an empty control plane with the backed-up one's keys, then start its workflows again."""
    restored = await restore(context, document)
    log.info("%s restored a backup of %s: %s", who.user, document.created_at, restored.rows)
    made = datetime.fromtimestamp(document.created_at, UTC).isoformat(timespec="seconds")
    await run_in_threadpool(record, context.store, EventDraft(
        EventKind.ADMIN_RESTORE, f"{who.user} restored a backup made {made}",
        audience=Audience.of_user(who), actor=who.user))
    return restored
