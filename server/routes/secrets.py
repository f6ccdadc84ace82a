"""Secret routes: create, list and delete the secrets a caller may reach (values are never returned;
the control worker resolves them through the internal route)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from berth.contracts import SecretCreated, SecretRequest, SecretView
from berth.contracts.base import SECRET_REF_PATTERN
from server.context import Context
from server.guards import Caller
from server.store.secrets import Secrets

router = APIRouter()


@router.post("/v1/secrets", status_code=201, response_model=SecretCreated)
async def create_secret(body: SecretRequest, context: Context, who: Caller) -> dict[str, Any]:
    return await run_in_threadpool(Secrets(context.store).create, who, body.ref, body.type, body.value, body.group)


@router.get("/v1/secrets", response_model=list[SecretView])
async def list_secrets(context: Context, who: Caller) -> list[dict[str, Any]]:
    return await run_in_threadpool(Secrets(context.store).list, who)


@router.delete("/v1/secrets", status_code=204)
async def delete_secret(ref: Annotated[str, Query(json_schema_extra={"pattern": SECRET_REF_PATTERN})], context: Context,
                        who: Caller) -> None:
    await run_in_threadpool(Secrets(context.store).delete, who, ref)
