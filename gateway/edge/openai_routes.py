"""The routes a model copy is reached on through Berth: the OpenAI API's, nothing else (issue 29).

vLLM guards only its `/v1`, `/v2`, `/inference` and `/cohere` prefixes with the copy key: `/invocations`,
`/tokenize`, `/detokenize`, `/pooling`, `/score`, `/classify`, `/rerank` and its operations routes answer
anyone who reaches the port. The endpoint proxy and the model gateway add the copy key to what they forward,
so they forward only an allow-list of the routes OpenAI clients use, on a canonical path (no `.`/`..`
segments, no empty ones: `/v1/../tokenize` would leave the allow-list on the copy's side), and refuse the
rest in one line. An OpenCode service endpoint serves its own web app and is not a model copy: the proxy
applies this only to endpoints whose upstream is a copy or a LiteLLM in front of copies."""

from __future__ import annotations

from typing import Any, Final

from berth.kinds import ProcessKind
from gateway.edge.asgi import json_answer
from gateway.edge.openai_errors import error_body
from gateway.edge.upstream import Send

# Exact routes (without the leading slash), as vLLM's OpenAI server and LiteLLM serve them.
ROUTES: Final = frozenset({
    "v1/chat/completions", "v1/completions", "v1/embeddings", "v1/responses", "v1/models",
    "v1/audio/transcriptions", "v1/audio/translations", "v1/rerank", "v1/score", "v1/messages",
    # LiteLLM's unprefixed spellings (an SDK whose base URL lacks /v1); vLLM answers them 404.
    "chat/completions", "completions", "embeddings", "models",
})
# Routes with an id after them: one model's card, one stored response (and its cancel / input items).
ID_ROUTES: Final = ("v1/models/", "v1/responses/")
# The upstreams that are model copies (or a LiteLLM in front of them): the allow-list applies to these.
MODEL_UPSTREAMS: Final = frozenset({ProcessKind.VLLM.value, ProcessKind.LITELLM.value, ProcessKind.GATEWAY.value})
SERVED = "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/models, /v1/audio/…, " \
         "/v1/rerank, /v1/score, /v1/messages"


def canonical(rest: str) -> bool:
    """Whether a path (after the prefix, without its leading slash) has no `.`, `..` or empty segment —
    the path the allow-list is checked on is then the path the upstream serves."""
    segments = rest.split("/")
    if segments and segments[-1] == "":
        segments = segments[:-1]  # one trailing slash is how some clients join a base URL
    return all(s not in ("", ".", "..") for s in segments) and "\\" not in rest


def served(rest: str) -> bool:
    """Whether `rest` (canonical, no leading slash) is one of the OpenAI routes."""
    path = rest.rstrip("/")
    if path in ROUTES:
        return True
    return any(path.startswith(prefix) and len(path) > len(prefix) for prefix in ID_ROUTES)


def refusal(rest: str) -> tuple[int, str, str] | None:
    """(status, code, one-line message) when `rest` may not go to a model copy; None when it may."""
    if rest in ROUTES:
        return None  # an exact route (every one canonical): the common case, one set lookup
    if not canonical(rest):
        return 400, "path_not_canonical", (
            f"The path /{rest} has an empty, '.' or '..' segment; send the route itself (e.g. /v1/chat/completions).")
    if rest.startswith("key/"):  # a Proxy=true endpoint answers these before (gateway/endpoint/litellm_keys.py)
        return 404, "keys_not_minted_here", (
            f"This endpoint does not mint LiteLLM keys (/{rest}): create one with `berth key create --endpoint ID` "
            "for the endpoint that serves the model (a Proxy=true endpoint also answers LiteLLM's /key/generate).")
    if not served(rest):
        return 404, "route_not_served", f"No route /{rest} on a model endpoint; it serves {SERVED}."
    return None


async def refused(send: Send, rest: str) -> bool:
    """Answer the refusal (OpenAI's error shape) and say True, or say False and send nothing."""
    found = refusal(rest)
    if found is None:
        return False
    status, code, message = found
    await json_answer(send, status, error_body(message, "invalid_request_error", code))
    return True


async def refuse_websocket(scope: dict[str, Any], send: Send) -> None:
    """A WebSocket upgrade on an endpoint path: Berth bridges none yet, so one 501 line (uvicorn's denial
    response extension), where an unanswered handshake was a bare 500 and a log line."""
    body = b"WebSocket upgrades are not supported on Berth endpoints yet; use HTTP (streamed answers are SSE).\n"
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 501,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1003})
