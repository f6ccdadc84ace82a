"""The PromptKey of a request's prompt: a hash of its first 64 characters, so that requests
that start alike meet vLLM's prefix cache on the same copy. It picks only among the copies the routing policy
finds equally good (all of them, idle; round_robin: its turn), so load-aware routing stays. For a policy that reads
the prompt (prefix_affinity) the key also carries the whole prompt's chained block hashes
(gateway/edge/prefix_affinity.py). The prompt is never logged or kept: only its hashes leave this module."""

from __future__ import annotations

import hashlib
from typing import Any

from berth.bounded_parse import TooDeep, load_json
from gateway.edge.prefix_affinity import BLOCK_CHARS, MAX_BLOCKS, prompt_blocks

PROMPT_PREFIX_CHARS = 64
PROMPT_CHARS = BLOCK_CHARS * MAX_BLOCKS  # what prefix_affinity hashes of a prompt at most


class PromptKey(str):
    """A session the proxy derived from the start of a request's prompt (`of_prompt`), not one the
    client asked for with `x-session-id`: it keeps the request on one copy only among those the policy finds
    equally good, so that a prompt meets its prefix cache without taking load-aware routing away. For a policy
    that reads the prompt (prefix_affinity) it also carries the prompt's chained block hashes."""

    blocks: tuple[bytes, ...] = ()  # gateway/edge/prefix_index.py `prompt_blocks`; () when not asked for


def of_prompt(request: Any, with_blocks: bool = False) -> PromptKey | None:
    """The PromptKey (a hash) of the first 64 characters of the last user message's content (chat) or of `prompt`
    (completions) of a parsed JSON body; None when it has neither. `with_blocks`: with the block hashes of the whole
    prompt (every message, in order, with its role) as well."""
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
    key = PromptKey(f"prompt:{digest}")
    if with_blocks:
        key.blocks = prompt_blocks(_whole_prompt(request, text))
    return key


def _whole_prompt(request: dict[str, Any], last_user_text: str) -> str:
    """The messages as the copy will see them, role and content, up to PROMPT_CHARS; a completion's prompt."""
    messages = request.get("messages")
    if not isinstance(messages, list):
        return last_user_text[:PROMPT_CHARS]
    parts: list[str] = []
    length = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        part = f"{message.get('role')}\x1f{_content_text(message.get('content')) or ''}\x1e"
        parts.append(part)
        length += len(part)
        if length >= PROMPT_CHARS:
            break
    return "".join(parts)[:PROMPT_CHARS]


def _content_text(content: Any) -> str | None:
    if isinstance(content, list):  # content parts: their text, in order
        content = "".join(part.get("text", "") for part in content
                          if isinstance(part, dict) and isinstance(part.get("text"), str))
    return content if isinstance(content, str) else None


def _last_user_text(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return None


def parsed(body: bytes) -> Any:
    """The JSON body, or None when it is not JSON; TooDeep (a one-line 400) when it is nested too deep to parse."""
    try:
        return load_json(body, "The request body")
    except TooDeep:
        raise
    except ValueError:
        return None


