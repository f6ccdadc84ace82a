"""Replies: what both completion routes answer once a plan is made — the whole object after generation,
or server-sent events token by token as the engine emits them, with vLLM's usage figures."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from simulator.engine import Engine, GenerationPlan
from simulator.sampling import Sampling

_SSE_DONE = "data: [DONE]\n\n"

# The choice a streamed chunk carries for one token: piece(token, index).
Piece = Callable[[str, int], Mapping[str, Any]]


async def reply(
    engine: Engine,
    completion_id: str,
    sampling: Sampling,
    plan: GenerationPlan,
    *,
    whole_object: str,
    chunk_object: str,
    whole: Mapping[str, Any],
    piece: Piece,
    last: Mapping[str, Any],
    after_usage: Mapping[str, Any] | None = None,
) -> Response:
    """Run the plan through the engine and answer. Streamed: a `chunk_object` event per token whose
    choice is `piece(token, index)`, then one with `last`, the usage when asked for, and [DONE].
    Whole: once generated, a `whole_object` with the one choice `whole`, the usage, then `after_usage`."""
    if sampling.stream:
        return StreamingResponse(
            _stream(engine, completion_id, chunk_object, sampling, plan, piece, last),
            media_type="text/event-stream",
        )
    async with aclosing(engine.generate(plan)) as tokens:
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
    engine: Engine,
    completion_id: str,
    chunk_object: str,
    sampling: Sampling,
    plan: GenerationPlan,
    piece: Piece,
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
    async with aclosing(engine.generate(plan)) as tokens:
        async for token in tokens:
            choice = piece(token, emitted)
            emitted += 1
            yield chunk([choice])
    yield chunk([last])
    if sampling.include_usage:
        yield chunk([], _usage(plan, emitted))
    yield _SSE_DONE


def _sse(payload: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _usage(plan: GenerationPlan, completion_tokens: int | None = None) -> dict[str, Any]:
    completion = plan.completion_tokens if completion_tokens is None else completion_tokens
    return {
        "prompt_tokens": plan.prompt_tokens,
        "total_tokens": plan.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }
