"""Audit chain routes: the endpoint proxy appends its records in batches (Berth's own services and
administrators only); callers list rows (administrators: every row; anyone else: their own requests' rows);
administrators verify the chain."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from berth.contracts import MAX_AUDIT_LIST, AuditAppended, AuditBatch, AuditRow, AuditVerdict
from berth.contracts.audit import ID_LENGTH
from server.context import Context
from server.guards import Admin, Caller

router = APIRouter()
IdQuery = Annotated[str | None, Query(max_length=ID_LENGTH)]


@router.post("/v1/internal/audit")
async def append_audit(batch: AuditBatch, context: Context, _who: Admin) -> AuditAppended:
    """Append the proxy's records to the chain, in order (a batch already there adds nothing: retries are safe)."""
    return await run_in_threadpool(context.store.audit.append_batch, batch)


@router.get("/v1/audit")
async def list_audit(context: Context, who: Caller, endpoint: IdQuery = None, key: IdQuery = None,
                     since: Annotated[float | None, Query(ge=0)] = None,
                     limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_LIST)] = 100) -> list[AuditRow]:
    """The newest rows that match, in chain order; a caller who is not an administrator sees only the
    rows of their own requests."""
    user = None if who.admin else who.user
    return await run_in_threadpool(context.store.audit.list, endpoint, key, user, since, limit)


@router.get("/v1/audit/verify")
async def verify_audit(context: Context, _who: Admin) -> AuditVerdict:
    """Recompute every hash and link of the chain; name the first row that does not hold."""
    return await run_in_threadpool(context.store.audit.verify)
