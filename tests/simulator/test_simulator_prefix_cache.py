"""The simulator's prefix cache (simulator/prefix_cache.py): chained block hashes, an LRU bound, and a hit that
skips its prefill in the engine, counted as vLLM counts it."""

from __future__ import annotations

import time
from contextlib import aclosing

import pytest

from simulator.cli import parse_command_line
from simulator.engine import Engine, FinishReason, GenerationPlan
from simulator.prefix_cache import BLOCK_TOKENS, PrefixCache, prompt_blocks

pytestmark = pytest.mark.timeout(30)
SHARED = " ".join(f"w{n}" for n in range(BLOCK_TOKENS * 4))  # four whole blocks


def test_blocks_are_whole_and_chained() -> None:
    assert len(prompt_blocks([SHARED, "a question"])) == 4
    assert prompt_blocks([SHARED + " x"]) == prompt_blocks([SHARED])  # a partial block is not one
    one = prompt_blocks(["a " * BLOCK_TOKENS + "b " * BLOCK_TOKENS])
    two = prompt_blocks(["b " * BLOCK_TOKENS + "b " * BLOCK_TOKENS])
    assert one[1] != two[1]  # the same words after a different prefix: another block


def test_the_cache_counts_leading_hits_and_keeps_its_bound() -> None:
    cache = PrefixCache(capacity_blocks=6)
    first = prompt_blocks([SHARED])
    assert cache.admit(first) == 0 and cache.admit(first) == 4
    other = prompt_blocks(["z " * BLOCK_TOKENS * 4])
    assert cache.admit(other) == 0 and len(cache) == 6  # two of `first`'s oldest blocks went
    assert cache.admit(first) == 0  # its first block is gone: no leading hit, though later blocks remain
    assert PrefixCache(0).admit(first) == 0


async def _ttft(engine: Engine, prompt: str) -> float:
    words = prompt.split()
    plan = GenerationPlan(prompt_tokens=len(words), pieces=("a",), finish_reason=FinishReason.STOP,
                          prompt_blocks=prompt_blocks([prompt]))
    started = time.monotonic()
    async with aclosing(engine.generate(plan)) as tokens:
        async for _ in tokens:
            return time.monotonic() - started
    raise AssertionError("no token")


async def test_a_cached_prefix_skips_its_prefill() -> None:
    environ = {"BERTH_SIM_TOKENS_PER_SECOND": "0", "BERTH_SIM_PREFILL_TOKENS_PER_SECOND": "640"}
    engine = Engine(parse_command_line(["m"], environ))
    miss = await _ttft(engine, SHARED + " first question")  # 66 tokens at 640/s: ~0.1 s
    hit = await _ttft(engine, SHARED + " second question")  # 2 uncached tokens: ~3 ms
    assert miss >= 0.1 and hit < miss / 4, (miss, hit)
    labels = {"model_name": "m", "engine": "0"}
    registry = engine.metrics.registry
    assert registry.get_sample_value("vllm:prefix_cache_queries_total", labels) == 132
    assert registry.get_sample_value("vllm:prefix_cache_hits_total", labels) == 64
