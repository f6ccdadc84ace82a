"""Audit chain routes: the endpoint proxy appends its records in batches (Berth's own services and
administrators only); callers list rows (administrators: every row; anyone else: their own requests' rows);
administrators verify the chain."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from berth.contracts import MAX_AUDIT_LIST, AuditAppended, AuditBatch, AuditRow, AuditVerdict
from berth.contracts.audit import ID_LENGTH
from server.context import Context
from server.guards import Admin, Caller

router = APIRouter()
IdQuery = Annotated[str | None, Query(max_length=ID_LENGTH)]


async def audit_batch(request: Request) -> AuditBatch:
    """The body, read by pydantic-core straight from its bytes: FastAPI's own body parameter runs json.loads, then
    validates the Python objects, twice the time (the API reads two records for every proxied request, issue 33).
    A dependency after the caller's: a stranger's body is never parsed. Its refusals are FastAPI's (422, one line)."""
    try:
        return AuditBatch.model_validate_json(await request.body())
    except ValidationError as error:
        raise RequestValidationError([{**item, "loc": ("body", *item["loc"])}
                                      for item in error.errors(include_url=False)]) from None


# The document's request body, as FastAPI would state a body parameter of this type (AuditPhase, the one schema
# it refers to, is among the document's components through AuditRow).
_BATCH_SCHEMA = AuditBatch.model_json_schema(ref_template="#/components/schemas/{model}")
_BATCH_SCHEMA.pop("$defs", None)
BATCH_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": _BATCH_SCHEMA}}}}


@router.post("/v1/internal/audit", openapi_extra=BATCH_BODY)
async def append_audit(context: Context, _who: Admin,
                       batch: Annotated[AuditBatch, Depends(audit_batch)]) -> AuditAppended:
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
