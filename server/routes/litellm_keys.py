"""LiteLLM's key contract for a LiteLLM-fronted endpoint (server/litellm_keys.py), for the endpoint proxy
only (an administrator's token: Berth's own services). The credential the client presented travels in the
body, never in a URL, and is never logged."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import LiteLLMDeletedKeys, LiteLLMIssuedKey, LiteLLMKeyCall, LiteLLMKeyInfoAnswer
from server.context import Context, ServerContext
from server.guards import Admin
from server.litellm_keys import LiteLLMKeys

router = APIRouter()
PREFIX = "/v1/internal/endpoints/{endpoint_id}/litellm-keys"


def _keys(context: ServerContext) -> LiteLLMKeys:
    return LiteLLMKeys(context.store, context.api_keys, context.settings.key_max_ttl)


@router.post(f"{PREFIX}/generate")
async def generate(endpoint_id: str, call: LiteLLMKeyCall, context: Context, _who: Admin) -> LiteLLMIssuedKey:
    return await run_in_threadpool(_keys(context).generate, endpoint_id, call)


@router.post(f"{PREFIX}/info")
async def info(endpoint_id: str, call: LiteLLMKeyCall, context: Context, _who: Admin) -> LiteLLMKeyInfoAnswer:
    return await run_in_threadpool(_keys(context).info, endpoint_id, call)


@router.post(f"{PREFIX}/delete")
async def delete(endpoint_id: str, call: LiteLLMKeyCall, context: Context, _who: Admin) -> LiteLLMDeletedKeys:
    return await run_in_threadpool(_keys(context).delete, endpoint_id, call)


@router.post(f"{PREFIX}/regenerate")
async def regenerate(endpoint_id: str, call: LiteLLMKeyCall, context: Context, _who: Admin) -> LiteLLMIssuedKey:
    return await run_in_threadpool(_keys(context).regenerate, endpoint_id, call)
