"""LiteLLM's key routes on a LiteLLM-fronted endpoint (`/key/generate`, `/key/info`, `/key/delete`,
`/key/regenerate`, `/key/{key}/regenerate`), answered by Berth from its own API keys through the control
plane (server/litellm_keys.py) in LiteLLM's JSON shapes. The endpoint proxy asks `serve` before its token
check: the master key is not a Berth token. Nothing under `/key/` reaches LiteLLM, so neither does the
master key sent with it; the credential goes to the API in a request body, never a URL, never a log."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol
from urllib.parse import parse_qs, unquote

from pydantic import BaseModel

from berth.api_client import ApiClient
from berth.bounded_parse import TooDeep, load_json
from berth.contracts import LiteLLMKeyCall
from berth.errors import AuthenticationError, BerthError, UserInputError
from berth.security import TokenVerifier
from gateway.edge.asgi import json_answer
from gateway.edge.litellm_contract import INVALID_KEY_MESSAGE, NO_KEY_MESSAGE, auth_error
from gateway.edge.master_key import sent_key
from gateway.edge.upstream import Receive, Send
from gateway.endpoint.route_table import Route

log = logging.getLogger("berth.proxy")

MAX_BODY_BYTES: Final = 64 * 1024  # a /key/* body is a few fields
Action = Callable[[ApiClient, str, LiteLLMKeyCall], Awaitable[BaseModel]]
# path (after the endpoint's URL) → (method, what the control plane does)
ACTIONS: Final[dict[str, tuple[str, Action]]] = {
    "key/generate": ("POST", lambda api, endpoint, call: api.litellm_generate_key(endpoint, call)),
    "key/info": ("GET", lambda api, endpoint, call: api.litellm_key_info(endpoint, call)),
    "key/delete": ("POST", lambda api, endpoint, call: api.litellm_delete_keys(endpoint, call)),
    "key/regenerate": ("POST", lambda api, endpoint, call: api.litellm_regenerate_key(endpoint, call)),
}
ERROR_TYPES: Final = {400: "bad_request_error", 401: "auth_error", 403: "auth_error", 404: "not_found_error"}


class KeyProxy(Protocol):
    """What `serve` needs of the endpoint proxy: its API client and the verifier that tells Berth tokens."""

    api: ApiClient
    verifier: TokenVerifier


def error(status: int, message: str) -> dict[str, Any]:
    """LiteLLM's error body (a ProxyException: param and code are strings)."""
    if status == 401:
        return auth_error(message, status)
    kind = ERROR_TYPES.get(status, "internal_server_error")
    return {"error": {"message": message, "type": kind, "param": "None", "code": str(status)}}


async def _answer(send: Send, status: int, body: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None,
                  ) -> None:
    await json_answer(send, status, json.dumps(body).encode(), extra)


def _route(rest: str) -> tuple[str, str | None] | None:
    """The action's path and the key a `/key/{key}/regenerate` path names; None: not a /key/ route."""
    path = rest.rstrip("/")
    if path != "key" and not path.startswith("key/"):
        return None
    if path not in ACTIONS and path.startswith("key/") and path.endswith("/regenerate") and path.count("/") >= 2:
        return "key/regenerate", unquote(path[len("key/"):-len("/regenerate")])
    return path, None


async def _body(receive: Receive) -> dict[str, Any]:
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise UserInputError("The client left before its request body arrived.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise UserInputError(f"The request body is larger than {MAX_BODY_BYTES // 1024} KiB.")
        chunks.append(chunk)
        more = bool(message.get("more_body"))
    raw = b"".join(chunks).strip()
    if not raw:
        return {}
    try:
        data = load_json(raw, "The request body")
    except TooDeep:
        raise  # its own line: not JSON is not what is wrong
    except (ValueError, UnicodeDecodeError):
        raise UserInputError("The request body is not JSON.") from None
    if not isinstance(data, dict):
        raise UserInputError("The request body must be a JSON object.")
    return data


async def serve(proxy: KeyProxy, route: Route, scope: dict[str, Any], receive: Receive, send: Send,
                rest: str) -> bool:
    """Answer a LiteLLM `/key/*` call of a LiteLLM-fronted endpoint; False (nothing sent) for any other
    request, which the endpoint proxy handles as before."""
    found = _route(rest) if route.fronts_pool else None
    if found is None:
        return False
    path, path_key = found
    if path not in ACTIONS:
        await _answer(send, 501, error(501, f"Berth serves LiteLLM's /key/generate, /key/info, /key/delete and "
                                            f"/key/regenerate only, not /{path}; `berth key` does the rest."))
        return True
    method, action = ACTIONS[path]
    if scope["method"] != method:
        await _answer(send, 405, {"detail": "Method Not Allowed"}, [(b"allow", method.encode())])
        return True
    presented = sent_key(scope["headers"], proxy.verifier)
    if not presented:
        await _answer(send, 401, auth_error(NO_KEY_MESSAGE, 401))
        return True
    try:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        key = path_key or (query.get("key") or [None])[0]
        body = await _body(receive) if method == "POST" else {}
        call = LiteLLMKeyCall(presented=presented.decode("latin-1"), key=key, body=body)
        answer = await action(proxy.api, route.id, call)
    except AuthenticationError as refused:
        await _answer(send, 401, auth_error(f"{INVALID_KEY_MESSAGE}. {refused}", 401))
    except BerthError as refused:
        if refused.http_status >= 500:
            log.warning("LiteLLM key call %s for endpoint %s failed: %s", path, route.id, refused)
        await _answer(send, refused.http_status, error(refused.http_status, str(refused)))
    except ValueError:  # pydantic's: a credential or key longer than any real one
        await _answer(send, 400, error(400, "The key or credential sent is longer than any Berth key."))
    else:
        await _answer(send, 200, answer.model_dump(mode="json"))
    return True
