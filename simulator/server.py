"""Server: the ASGI app with vLLM's OpenAI-compatible routes, /health and /metrics over a simulated Engine."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from simulator.cli import EngineConfig
from simulator.engine import (
    Engine,
    GenerationPlan,
    count_prompt_tokens,
    placeholder_arguments,
    plan_generation,
    reply_text,
)

SIMULATED_VERSION = "0.0.0+berth.simulator"
_AUTO_TOOLS_DISABLED = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


class ApiError(Exception):
    """An error the API returns as vLLM's `{"error": {...}}` body."""

    def __init__(self, status: int, message: str, error_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param

    @classmethod
    def bad_request(cls, message: str, param: str | None = None) -> ApiError:
        return cls(400, message, "BadRequestError", param)

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status}
        return JSONResponse({"error": error}, status_code=self.status)


@dataclass(frozen=True)
class _Sampling:
    """The request fields that shape generation, common to chat and completions."""

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool


def _sse(payload: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


_SSE_DONE = "data: [DONE]\n\n"


def _usage(plan: GenerationPlan, completion_tokens: int | None = None) -> dict[str, Any]:
    completion = plan.completion_tokens if completion_tokens is None else completion_tokens
    return {
        "prompt_tokens": plan.prompt_tokens,
        "total_tokens": plan.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def _message_text(content: Any) -> str:
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


class OpenAIRoutes:
    """The HTTP handlers, holding the configuration and engine they serve."""

    def __init__(self, config: EngineConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.created = int(time.time())

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

    # --- shared request handling --------------------------------------------------------------

    async def _read_body(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except ValueError as error:
            raise ApiError.bad_request(f"Invalid JSON body: {error}") from None
        if not isinstance(body, dict):
            raise ApiError.bad_request("The request body must be a JSON object")
        model = body.get("model")
        if model is not None and model not in self.config.served_model_names:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        return body

    def _sampling(self, body: Mapping[str, Any]) -> _Sampling:
        if body.get("n") not in (None, 1):
            raise ApiError.bad_request("The simulator supports n=1 only", "n")
        max_tokens = _optional_int(body, "max_completion_tokens", "max_tokens")
        if max_tokens is not None and max_tokens < 1:
            raise ApiError.bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        stream_options = body.get("stream_options")
        if not isinstance(stream_options, dict):
            stream_options = {}
        return _Sampling(
            model=body.get("model") or self.config.served_model_name,
            stream=bool(body.get("stream", False)),
            include_usage=bool(stream_options.get("include_usage", False)),
            max_tokens=max_tokens,
            min_tokens=_optional_int(body, "min_tokens") or 0,
            ignore_eos=bool(body.get("ignore_eos", False)),
        )

    def _token_budget(self, prompt_tokens: int, max_tokens: int | None) -> int:
        """The most tokens the reply may have; refuses prompts that do not fit, as vLLM does."""
        limit = self.config.max_model_len
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

    def _plan(self, text: str, prompt_tokens: int, sampling: _Sampling) -> GenerationPlan:
        return plan_generation(
            text,
            prompt_tokens,
            self._token_budget(prompt_tokens, sampling.max_tokens),
            min_tokens=sampling.min_tokens,
            ignore_eos=sampling.ignore_eos,
        )

    # --- /v1/chat/completions -----------------------------------------------------------------

    def _chosen_tool(self, body: Mapping[str, Any], messages: list[Any]) -> Mapping[str, Any] | None:
        tools = body.get("tools") or []
        tool_choice = body.get("tool_choice")
        if not tools or tool_choice == "none":
            return None
        if tool_choice is None or tool_choice == "auto":
            if not self.config.enable_auto_tool_choice:
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

    async def chat_completions(self, request: Request) -> Response:
        body = await self._read_body(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError.bad_request("messages must be a non-empty list", "messages")
        sampling = self._sampling(body)
        texts = [_message_text(message.get("content")) for message in messages if isinstance(message, dict)]
        prompt_tokens = count_prompt_tokens(texts)
        tool = self._chosen_tool(body, messages)
        if tool is not None:
            plan = self._plan(placeholder_arguments(tool), prompt_tokens, sampling)
        else:
            user_texts = [
                _message_text(message.get("content"))
                for message in messages
                if isinstance(message, dict) and message.get("role") == "user"
            ]
            prompt = user_texts[-1] if user_texts else texts[-1]
            plan = self._plan(reply_text(prompt, self.config.reply), prompt_tokens, sampling)
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        finish_reason = plan.finish_reason.value
        message: dict[str, Any] = {"role": "assistant", "reasoning_content": None}
        delta: Callable[[str, int], dict[str, Any]]
        if tool is None:
            message.update(content=plan.text, tool_calls=[])

            def delta(piece: str, index: int) -> dict[str, Any]:
                return {"content": piece}

        else:
            name = (tool.get("function") or {}).get("name", "")
            call_id = f"chatcmpl-tool-{uuid.uuid4().hex}"
            function = {"name": name, "arguments": plan.text}
            message.update(content=None, tool_calls=[{"id": call_id, "type": "function", "function": function}])
            finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason

            def delta(piece: str, index: int) -> dict[str, Any]:
                if index == 0:
                    opening = {"name": name, "arguments": piece}
                    return {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": opening}]}
                return {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}

        def streamed(piece: str, index: int) -> dict[str, Any]:
            said = delta(piece, index)
            # The first chunk also says who speaks, as vLLM's does.
            return {
                "index": 0,
                "delta": {"role": "assistant", **said} if index == 0 else said,
                "logprobs": None,
                "finish_reason": None,
            }

        return await self._reply(
            completion_id,
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
        body = await self._read_body(request)
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
        sampling = self._sampling(body)
        plan = self._plan(reply_text(prompt_text, self.config.reply), prompt_tokens, sampling)
        finish_reason = plan.finish_reason.value

        def choice(text: str, finish_reason: str | None = None) -> dict[str, Any]:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}

        return await self._reply(
            f"cmpl-{uuid.uuid4().hex}",
            sampling,
            plan,
            whole_object="text_completion",
            chunk_object="text_completion",
            whole={**choice(plan.text, finish_reason), "prompt_logprobs": None},
            piece=lambda piece, _: choice(piece),
            last=choice("", finish_reason),
        )

    # --- what both completion routes answer -----------------------------------------------------

    async def _reply(
        self,
        completion_id: str,
        sampling: _Sampling,
        plan: GenerationPlan,
        *,
        whole_object: str,
        chunk_object: str,
        whole: Mapping[str, Any],
        piece: Callable[[str, int], Mapping[str, Any]],
        last: Mapping[str, Any],
        after_usage: Mapping[str, Any] | None = None,
    ) -> Response:
        """Run the plan through the engine and answer. Streamed: a `chunk_object` event per token whose
        choice is `piece(token, index)`, then one with `last`, the usage when asked for, and [DONE].
        Whole: once generated, a `whole_object` with the one choice `whole`, the usage, then `after_usage`."""
        if sampling.stream:
            return StreamingResponse(
                self._stream(completion_id, chunk_object, sampling, plan, piece, last),
                media_type="text/event-stream",
            )
        async with aclosing(self.engine.generate(plan)) as tokens:
            async for _ in tokens:
                pass
        return JSONResponse(
            {
                "id": completion_id,
                "object": whole_object,
                "created": int(time.time()),
                "model": sampling.model,
                "choices": [whole],
                "usage": _usage(plan),
                **(after_usage or {}),
            }
        )

    async def _stream(
        self,
        completion_id: str,
        chunk_object: str,
        sampling: _Sampling,
        plan: GenerationPlan,
        piece: Callable[[str, int], Mapping[str, Any]],
        last: Mapping[str, Any],
    ) -> AsyncIterator[str]:
        created = int(time.time())

        def chunk(choices: list[Mapping[str, Any]], usage: Mapping[str, Any] | None = None) -> str:
            event = {
                "id": completion_id,
                "object": chunk_object,
                "created": created,
                "model": sampling.model,
                "choices": choices,
            }
            if usage is not None:
                event["usage"] = usage
            return _sse(event)

        emitted = 0
        async with aclosing(self.engine.generate(plan)) as tokens:
            async for token in tokens:
                choice = piece(token, emitted)
                emitted += 1
                yield chunk([choice])
        yield chunk([last])
        if sampling.include_usage:
            yield chunk([], _usage(plan, emitted))
        yield _SSE_DONE


class _ApiKeyMiddleware:
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


async def _api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return error.response()


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
        ],
        exception_handlers={ApiError: _api_error},
    )
    app.state.engine = routes.engine
    app.state.config = config
    if config.api_key:
        app.add_middleware(_ApiKeyMiddleware, api_key=config.api_key)
    return app
