"""The PromptKey of a request's prompt (`routing.PromptKey`): a hash of its first 64 characters, so that requests
that start alike meet vLLM's prefix cache on the same copy. It picks only among the copies the routing policy
finds equally good (all of them, idle; round_robin: its turn), so load-aware routing stays. The prompt is never
logged or kept: only its hash leaves this module."""

from __future__ import annotations

import hashlib
from typing import Any

from berth.bounded_parse import TooDeep, load_json
from gateway.edge import routing

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


