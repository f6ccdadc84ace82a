"""Liveness and the published signing keys (JWKS): the two routes that need no token."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from berth.contracts import Health, Jwks
from server.context import Context
from server.refusals import refusals

router = APIRouter()


@router.get("/healthz")
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/.well-known/jwks.json", response_model=Jwks, responses=refusals(404))  # publication off
async def jwks(context: Context) -> JSONResponse:
    if not context.settings.publish_jwks:
        return JSONResponse({"detail": "signing-key publication is turned off on this cluster", "code": "not_found"},
                            404)
    return JSONResponse(context.signing.jwks(), headers={"Cache-Control": "max-age=300"})
