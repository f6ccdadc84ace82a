"""What a completion request asks for, read and checked as vLLM does: the JSON body, the fields that
shape generation, the token budget the context leaves, and the tool a chat request makes the model call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from simulator.api_error import ApiError
from simulator.cli import EngineConfig
from simulator.engine import GenerationPlan, plan_generation

_AUTO_TOOLS_DISABLED = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


@dataclass(frozen=True)
class Sampling:
    """The request fields that shape generation, common to chat and completions."""

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool


async def read_body(request: Request, config: EngineConfig) -> dict[str, Any]:
    """The request's JSON object, its `model` (when named) one this server serves."""
    try:
        body = json.loads(await request.body())
    except ValueError as error:
        raise ApiError.bad_request(f"Invalid JSON body: {error}") from None
    if not isinstance(body, dict):
        raise ApiError.bad_request("The request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in config.served_model_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    return body


def sampling_of(body: Mapping[str, Any], config: EngineConfig) -> Sampling:
    if body.get("n") not in (None, 1):
        raise ApiError.bad_request("The simulator supports n=1 only", "n")
    max_tokens = _optional_int(body, "max_completion_tokens", "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        raise ApiError.bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    stream_options = body.get("stream_options")
    if not isinstance(stream_options, dict):
        stream_options = {}
    return Sampling(
        model=body.get("model") or config.served_model_name,
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)),
        max_tokens=max_tokens,
        min_tokens=_optional_int(body, "min_tokens") or 0,
        ignore_eos=bool(body.get("ignore_eos", False)),
    )


def plan_for(text: str, prompt_tokens: int, sampling: Sampling, config: EngineConfig) -> GenerationPlan:
    """The generation the engine runs for this request, within the token budget."""
    return plan_generation(
        text,
        prompt_tokens,
        _token_budget(prompt_tokens, sampling.max_tokens, config.max_model_len),
        min_tokens=sampling.min_tokens,
        ignore_eos=sampling.ignore_eos,
    )


def _token_budget(prompt_tokens: int, max_tokens: int | None, limit: int) -> int:
    """The most tokens the reply may have; refuses prompts that do not fit, as vLLM does."""
    if prompt_tokens >= limit:
        raise ApiError.bad_request(
            f"This model's maximum context length is {limit} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages."
        )
    if max_tokens is None:
        return limit - prompt_tokens
    if prompt_tokens + max_tokens > limit:
        raise ApiError.bad_request(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
            f"context length is {limit} tokens and your request has {prompt_tokens} input tokens "
            f"({max_tokens} > {limit} - {prompt_tokens}).",
            "max_tokens",
        )
    return max_tokens


def chosen_tool(body: Mapping[str, Any], messages: list[Any], config: EngineConfig) -> Mapping[str, Any] | None:
    """The tool this chat request makes the model call, or None for an answer in words."""
    tools = body.get("tools") or []
    tool_choice = body.get("tool_choice")
    if not tools or tool_choice == "none":
        return None
    if tool_choice is None or tool_choice == "auto":
        if not config.enable_auto_tool_choice:
            raise ApiError.bad_request(_AUTO_TOOLS_DISABLED, "tool_choice")
        # A tool result just came back: answer in words, so agent loops come to an end.
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
            return None
        return tools[0]  # type: ignore[no-any-return]
    if tool_choice == "required":
        return tools[0]  # type: ignore[no-any-return]
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        for tool in tools:
            if (tool.get("function") or {}).get("name") == wanted:
                return tool  # type: ignore[no-any-return]
        raise ApiError.bad_request(f"Tool '{wanted}' has not been passed in `tools`.", "tool_choice")
    raise ApiError.bad_request(f"Invalid tool_choice {tool_choice!r}", "tool_choice")


def message_text(content: Any) -> str:
    """The text of a chat message's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part for part in content if isinstance(part, dict) and part.get("type") == "text"]
        return " ".join(str(part.get("text", "")) for part in parts)
    return ""


def _optional_int(body: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ApiError.bad_request(f"{name} must be an integer, got {value!r}", name)
        return value
    return None
