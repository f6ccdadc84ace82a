"""CopyGuard: a copy's port answers only Berth, on every path.

vLLM's own key check (`VLLM_API_KEY`) covers only /v1, /v2, /inference and /cohere: /invocations gave a full
chat completion without it, and /tokenize, /detokenize, /pooling, /score, /classify, /rerank, /metrics and
the rest answered anyone who could reach the port. This middleware, loaded by vLLM's `--middleware`, wants
the same key (`Authorization: Bearer <VLLM_API_KEY>`) on every HTTP and WebSocket request, OPTIONS too,
before vLLM sees it. The one exception is `GET /health`: an empty 200 that says only "alive", which Berth's
readiness probe reads before it hands the key to a listener it has proven to be the copy's own.

Standard library only (it runs in the engine's interpreter). Refuses to start without a key: a guard that
lets everything through would be worse than none, because it would look like one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN = frozenset({("GET", "/health")})
REFUSAL = json.dumps({"error": "Unauthorized: this port answers only Berth (send the copy's key)"}).encode()
KEY_VARIABLE = "VLLM_API_KEY"
WEBSOCKET_POLICY_VIOLATION = 1008


class CopyGuard:
    """Pure ASGI middleware (no Starlette needed): every request but `GET /health` carries the copy's key."""

    def __init__(self, app: App, api_key: str | None = None) -> None:
        key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE, "")
        if not key:
            raise RuntimeError(f"berth_rank_guard.CopyGuard needs {KEY_VARIABLE}: a copy never serves unguarded")
        self.app = app
        self._digest = hashlib.sha256(key.encode("utf-8")).digest()

    def _verified(self, scope: Scope) -> bool:
        # Several Authorization headers pass only if every one is the key: readers disagree on which one
        # counts (Starlette's takes the first), so no order of them can slip one past vLLM's own check.
        values = [value for name, value in scope.get("headers", ()) if name.lower() == b"authorization"]
        if not values:
            return False
        for value in values:
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer":
                return False
            if not hmac.compare_digest(hashlib.sha256(token.encode("utf-8")).digest(), self._digest):
                return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if (scope.get("method", ""), path) in OPEN or self._verified(scope):
                await self.app(scope, receive, send)
                return
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(REFUSAL)).encode())]})
            await send({"type": "http.response.body", "body": REFUSAL})
            return
        if kind == "websocket" and not self._verified(scope):
            # Closing before accepting: the server answers the upgrade with 403 and no socket opens.
            await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})
            return
        await self.app(scope, receive, send)  # lifespan, and verified WebSockets
