"""vLLM's routes outside its key's prefixes, as a generative model's server answers them (vLLM 0.32).

vLLM's AuthenticationMiddleware guards only /v1, /v2, /inference and /cohere (simulator/api_key.py); these
answer whoever reaches the port: /tokenize and /detokenize, SageMaker's /ping and /invocations (a chat or a
completion by the body's shape), and the pooling family (/pooling, /score, /classify, /rerank), which a
generative model refuses as not implemented. The simulator serves them so that the fast tests see what the
real engine exposes (issue 29: a copy answers only Berth) instead of a 404 the engine never gives."""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from simulator.api_error import ApiError
from simulator.cli import EngineConfig
from simulator.sampling import read_body

Handler = Callable[[Request], Awaitable[Response]]
POOLING = {"/pooling": "Pooling", "/score": "Score", "/classify": "Classification", "/rerank": "Rerank"}


def _token_id(word: str) -> int:
    return zlib.crc32(word.encode()) % 50_000  # the simulator's vocabulary: one id per word, stable


def routes(config: EngineConfig, chat: Handler, completion: Handler, health: Handler) -> list[Route]:
    async def tokenize(request: Request) -> Response:
        body = await read_body(request, config)
        text = body.get("prompt")
        if text is None and isinstance(body.get("messages"), list):
            text = " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
        if not isinstance(text, str):
            raise ApiError.bad_request("Either `prompt` or `messages` is required")
        tokens = [_token_id(word) for word in text.split()]
        return JSONResponse({"count": len(tokens), "max_model_len": config.max_model_len, "tokens": tokens,
                             "token_strs": None})

    async def detokenize(request: Request) -> Response:
        body = await read_body(request, config)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ApiError.bad_request("`tokens` must be a list of token ids")
        return JSONResponse({"prompt": " ".join(f"tok{t}" for t in tokens)})

    async def invocations(request: Request) -> Response:
        body = await read_body(request, config)
        if "messages" in body:
            return await chat(request)
        if "prompt" in body:
            return await completion(request)
        raise ApiError.bad_request("Cannot find suitable handler for request")

    def pooling(name: str) -> Handler:
        async def refuse(request: Request) -> Response:
            raise ApiError(501, f"The model does not support {name} API", "NotImplementedError")
        return refuse

    return [
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/ping", health, methods=["GET", "POST"]),
        Route("/invocations", invocations, methods=["POST"]),
        *(Route(path, pooling(name), methods=["POST"]) for path, name in POOLING.items()),
    ]
