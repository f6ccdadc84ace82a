"""Server: the ASGI app with vLLM's OpenAI-compatible routes, /health and /metrics over a simulated Engine.

Reading a request lives in `sampling.py`, answering it in `replies.py`, the error body in `api_error.py`
and the `--api-key` check in `api_key.py`."""

from __future__ import annotations

import importlib
import inspect
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from simulator import unguarded
from simulator.api_error import ApiError, FailShare, api_error_response
from simulator.api_key import ApiKeyMiddleware
from simulator.cli import EngineConfig
from simulator.engine import (
    Engine,
    GenerationPlan,
    count_prompt_tokens,
    placeholder_arguments,
    reply_text,
)
from simulator.prefix_cache import prompt_blocks
from simulator.replies import reply
from simulator.sampling import chosen_tool, message_text, plan_for, read_body, sampling_of

SIMULATED_VERSION = "0.0.0+berth.simulator"


class OpenAIRoutes:
    """The HTTP handlers, holding the configuration and engine they serve."""

    def __init__(self, config: EngineConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.created = int(time.time())
        self.failures = FailShare(config.fail_share)

    # --- plain routes -------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": SIMULATED_VERSION})

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def models(self, request: Request) -> Response:
        cards = [
            {
                "id": name,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": self.config.model,
                "parent": None,
                "max_model_len": self.config.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": self.created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in self.config.served_model_names
        ]
        return JSONResponse({"object": "list", "data": cards})

    # --- /v1/chat/completions -----------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        self.failures.check()
        body = await read_body(request, self.config)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError.bad_request("messages must be a non-empty list", "messages")
        sampling = sampling_of(body, self.config)
        texts = [message_text(message.get("content")) for message in messages if isinstance(message, dict)]
        prompt_tokens = count_prompt_tokens(texts)
        tool = chosen_tool(body, messages, self.config)
        if tool is not None:
            plan = plan_for(placeholder_arguments(tool), prompt_tokens, sampling, self.config)
        else:
            user_texts = [
                message_text(message.get("content"))
                for message in messages
                if isinstance(message, dict) and message.get("role") == "user"
            ]
            prompt = user_texts[-1] if user_texts else texts[-1]
            plan = plan_for(reply_text(prompt, self.config.reply), prompt_tokens, sampling, self.config)
        plan = replace(plan, prompt_blocks=prompt_blocks(texts))
        message, finish_reason, delta = _chat_answer(plan, tool)

        def streamed(piece: str, index: int) -> dict[str, Any]:
            said = delta(piece, index)
            # The first chunk also says who speaks, as vLLM's does.
            return {
                "index": 0,
                "delta": {"role": "assistant", **said} if index == 0 else said,
                "logprobs": None,
                "finish_reason": None,
            }

        return await reply(
            self.engine,
            f"chatcmpl-{uuid.uuid4().hex}",
            sampling,
            plan,
            whole_object="chat.completion",
            chunk_object="chat.completion.chunk",
            whole={
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            },
            piece=streamed,
            last={"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason},
            after_usage={"prompt_logprobs": None},
        )

    # --- /v1/completions ----------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        self.failures.check()
        body = await read_body(request, self.config)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            prompt_text, prompt_tokens = prompt, count_prompt_tokens([prompt])
        elif isinstance(prompt, list) and prompt and all(isinstance(token, int) for token in prompt):
            prompt_text, prompt_tokens = "", len(prompt)  # token IDs: the count is known, the text is not
        elif isinstance(prompt, list) and len(prompt) > 1:
            raise ApiError.bad_request("The simulator supports one prompt per request", "prompt")
        else:
            raise ApiError.bad_request("prompt must be a string or a list of token IDs", "prompt")
        sampling = sampling_of(body, self.config)
        plan = plan_for(reply_text(prompt_text, self.config.reply), prompt_tokens, sampling, self.config)
        plan = replace(plan, prompt_blocks=prompt_blocks([prompt_text]))
        finish_reason = plan.finish_reason.value

        def choice(text: str, finish_reason: str | None = None) -> dict[str, Any]:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}

        return await reply(
            self.engine,
            f"cmpl-{uuid.uuid4().hex}",
            sampling,
            plan,
            whole_object="text_completion",
            chunk_object="text_completion",
            whole={**choice(plan.text, finish_reason), "prompt_logprobs": None},
            piece=lambda piece, _: choice(piece),
            last=choice("", finish_reason),
        )


def _chat_answer(
    plan: GenerationPlan, tool: Mapping[str, Any] | None
) -> tuple[dict[str, Any], str, Callable[[str, int], dict[str, Any]]]:
    """The assistant's whole message, its finish reason, and what each streamed token adds to the
    delta: words, or the tool call's arguments (the first chunk opens the call with its id and name)."""
    finish_reason = plan.finish_reason.value
    message: dict[str, Any] = {"role": "assistant", "reasoning_content": None}
    if tool is None:
        message.update(content=plan.text, tool_calls=[])

        def words(piece: str, index: int) -> dict[str, Any]:
            return {"content": piece}

        return message, finish_reason, words
    name = (tool.get("function") or {}).get("name", "")
    call_id = f"chatcmpl-tool-{uuid.uuid4().hex}"
    function = {"name": name, "arguments": plan.text}
    message.update(content=None, tool_calls=[{"id": call_id, "type": "function", "function": function}])

    def arguments(piece: str, index: int) -> dict[str, Any]:
        if index == 0:
            opening = {"name": name, "arguments": piece}
            return {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": opening}]}
        return {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}

    return message, "tool_calls" if finish_reason == "stop" else finish_reason, arguments


def create_app(config: EngineConfig, engine: Engine | None = None) -> Starlette:
    """Build the simulated vLLM API server for `config` (pass `engine` to share or inspect one)."""
    routes = OpenAIRoutes(config, engine or Engine(config))
    app = Starlette(
        routes=[
            Route("/health", routes.health, methods=["GET"]),
            Route("/version", routes.version, methods=["GET"]),
            Route("/metrics", routes.metrics, methods=["GET"]),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/v1/chat/completions", routes.chat_completions, methods=["POST"]),
            Route("/v1/completions", routes.completions, methods=["POST"]),
            *unguarded.routes(config, routes.chat_completions, routes.completions, routes.health),
        ],
        exception_handlers={ApiError: api_error_response},
    )
    app.state.engine = routes.engine
    app.state.config = config
    if config.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=config.api_key)
    for dotted in config.middleware:
        _add_middleware(app, dotted)
    return app


def _add_middleware(app: Starlette, dotted: str) -> None:
    """vLLM's `--middleware` (vllm/entrypoints/serve/middleware/register.py, 0.32): a class is added as ASGI
    middleware, a coroutine function as an HTTP one, anything else refused; each added outside the last."""
    module_path, _, name = dotted.rpartition(".")
    imported = getattr(importlib.import_module(module_path), name)
    if inspect.isclass(imported):
        app.add_middleware(imported)  # type: ignore[arg-type]  # any ASGI middleware class, as vLLM takes it
    elif inspect.iscoroutinefunction(imported):
        app.add_middleware(BaseHTTPMiddleware, dispatch=imported)
    else:
        raise ValueError(f"Invalid middleware {dotted}. Must be a function or a class.")
