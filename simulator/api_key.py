"""ApiKeyMiddleware: vLLM's `--api-key` check in front of the simulated server."""

from __future__ import annotations

import hashlib
import secrets

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send


class ApiKeyMiddleware:
    """vLLM's AuthenticationMiddleware (vllm/entrypoints/serve/middleware/authenticate.py, 0.32), rule for
    rule: with `--api-key` or `VLLM_API_KEY`, every path under /v1, /v2, /inference or /cohere (after the
    root path) wants `Authorization: Bearer <key>` (the scheme in any case) and answers 401
    `{"error": "Unauthorized"}` without it; OPTIONS and every other path (/health, /metrics, /version)
    stay open. Compared as SHA-256 digests in constant time, as vLLM does."""

    GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.key_digest = hashlib.sha256(api_key.encode("utf-8")).digest()

    def _verified(self, scope: Scope) -> bool:
        value = Headers(scope=scope).get("authorization")
        if not value:
            return False
        scheme, _, param = value.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return secrets.compare_digest(hashlib.sha256(param.encode("utf-8")).digest(), self.key_digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("method") != "OPTIONS":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path.startswith(self.GUARDED_PREFIX) and not self._verified(scope):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)
