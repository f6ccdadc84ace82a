"""The session a request keeps its copy by (`routing.affinity`): its `x-session-id`, or — when it sends
none and there is a choice of copy to make — a hash of its prompt's first 64 characters, so that requests
that start alike meet vLLM's prefix cache on the same copy. That one is a `routing.PromptKey`: it picks
only among the copies the routing policy finds equally good (all of them, idle; round_robin: its turn),
so load-aware routing stays. The prompt is never logged or kept: only its hash leaves this module, and
the body is parsed only when more than one copy is eligible."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from berth.bounded_parse import TooDeep, load_json
from gateway import routing
from gateway.answers import header
from gateway.deadlines import Exchange
from gateway.limits import Refused
from gateway.route_table import Route

Headers = list[tuple[bytes, bytes]]
PROMPT_PREFIX_CHARS = 64


def of_prompt(request: Any) -> routing.PromptKey | None:
    """The PromptKey (a hash) of the first 64 characters of the last user message's content (chat) or of `prompt`
    (completions) of a parsed JSON body; None when it has neither."""
    if not isinstance(request, dict):
        return None
    text = _last_user_text(request.get("messages"))
    if text is None:
        prompt = request.get("prompt")
        if isinstance(prompt, list) and prompt:
            prompt = prompt[0]
        text = prompt if isinstance(prompt, str) else None
    if not text:
        return None
    digest = hashlib.blake2b(text[:PROMPT_PREFIX_CHARS].encode("utf-8", "replace"), digest_size=16).hexdigest()
    return routing.PromptKey(f"prompt:{digest}")


def _last_user_text(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts: their text, in order
                content = "".join(part.get("text", "") for part in content
                                  if isinstance(part, dict) and isinstance(part.get("text"), str))
            return content if isinstance(content, str) else None
    return None


def parsed(body: bytes) -> Any:
    """The JSON body, or None when it is not JSON; TooDeep (a one-line 400) when it is nested too deep to parse."""
    try:
        return load_json(body, "The request body")
    except TooDeep:
        raise
    except ValueError:
        return None


async def of_request(route: Route, headers: Headers, exchange: Exchange) -> str | None:
    """The endpoint proxy's session for a request: `x-session-id`, else the prompt's hash when the route
    picks among more than one eligible copy (the body is then read whole; `exchange` hands it on). Refused 400: a
    body nested too deep to parse."""
    session = header(headers, b"x-session-id")
    if session is not None or route.service_url or route.fronts_pool or len(route.pool) < 2:
        return session
    if len(routing.eligible(route.pool, time.monotonic())) < 2:
        return None
    body = await exchange.whole_body()
    try:
        return of_prompt(parsed(body)) if body is not None else None
    except TooDeep as error:
        raise Refused(400, "nesting_depth", str(error)) from None
