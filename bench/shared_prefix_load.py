"""A shared-prefix load for bench/routing_quality.py (issue 36): many requests over a few long documents, the way
a RAG service or an agent's long system prompt sends them, timed to the first streamed token.

DOCUMENTS distinct prefixes of PREFIX_WORDS words (the simulator's tokens; `--document-tokens`), each request one of
them plus a short question of its own, chosen at random (seeded) and sent open loop (Poisson). Each copy's prefix
cache holds CACHE_DOCUMENTS of the documents, fewer than all: a router that sends every document everywhere
thrashes each copy's cache and pays most prefills in full; one that keeps a document on one copy pays each once."""

from __future__ import annotations

import asyncio
import random
import time

import httpx

from simulator.prefix_cache import BLOCK_TOKENS

DOCUMENTS = 12
PREFIX_WORDS = 2048  # 128 of the simulator's 16-token blocks; a miss: ~102 ms of one copy's prefill
CACHE_DOCUMENTS = 5  # each copy's prefix cache, in documents
PREFILL_TOKENS_PER_S = 20_000  # a hit: ~1 ms (the question's tokens)
REPLY_TOKENS = 8
RATE = 40.0  # requests/s to a pool of three
SECONDS = 30


def cache_blocks(words: int) -> int:
    """Each copy's prefix cache: CACHE_DOCUMENTS documents of `words`, and the questions' blocks beside them."""
    return CACHE_DOCUMENTS * words // BLOCK_TOKENS + 8


def copy_env(words: int) -> dict[str, str]:
    """The simulator copies' environment: prefill priced, the cache sized (BERTH_SIM_*: docs/simulator.md)."""
    return {"BERTH_SIM_PREFILL_TOKENS_PER_SECOND": str(PREFILL_TOKENS_PER_S),
            "BERTH_SIM_PREFIX_CACHE_BLOCKS": str(cache_blocks(words))}


def document(number: int, words: int) -> str:
    return " ".join(f"doc{number}-w{word}" for word in range(words))


def requests(rate: float, seconds: float, seed: int) -> list[tuple[float, int]]:
    """(offset s, document) of each request: the same list for every policy."""
    rng, at = random.Random(seed), 0.0
    out: list[tuple[float, int]] = []
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            return out
        out.append((at, rng.randrange(DOCUMENTS)))


def body(model: str, number: int, question: int, words: int) -> dict[str, object]:
    return {"model": model, "max_tokens": REPLY_TOKENS, "ignore_eos": True, "stream": True,
            "messages": [{"role": "system", "content": document(number, words)},
                         {"role": "user", "content": f"Question {question}: what does it say?"}]}


async def first_token_times(url: str, token: str, model: str, load: list[tuple[float, int]],
                            words: int = PREFIX_WORDS) -> list[float]:
    """Send each request at its offset regardless of those pending; seconds from sending to the first chunk."""
    times: list[float] = []
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=120, limits=limits, headers={"Authorization": f"Bearer {token}"}) as client:
        async def one(index: int, offset: float, number: int, start: float) -> None:
            await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
            sent = time.monotonic()
            async with client.stream("POST", url, json=body(model, number, index, words)) as response:
                response.raise_for_status()
                first: float | None = None
                async for line in response.aiter_lines():
                    if first is None and line.startswith("data: {"):
                        first = time.monotonic() - sent
            assert first is not None, "a stream without a chunk"
            times.append(first)

        for number in range(3):  # the connections warm, without warming more than three documents
            (await client.post(url, json={**body(model, number, -1, words), "stream": False})).raise_for_status()
        start = time.monotonic() + 0.2
        await asyncio.gather(*(one(index, offset, number, start) for index, (offset, number) in enumerate(load)))
    return times
