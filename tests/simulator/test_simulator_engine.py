"""The engine's replies, token plans and queueing, in process and without HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing

from simulator.cli import parse_command_line
from simulator.engine import (
    Engine,
    FinishReason,
    GenerationPlan,
    count_prompt_tokens,
    placeholder_arguments,
    plan_generation,
    reply_text,
    split_into_tokens,
)


def _successes(engine: Engine, reason: str) -> float | None:
    labels = {"model_name": "m", "engine": "0", "finished_reason": reason}
    return engine.metrics.registry.get_sample_value("vllm:request_success_total", labels)


def test_replies_are_deterministic_and_read_naturally() -> None:
    assert reply_text("What is the capital of France?") == "The capital of France is Paris."
    assert reply_text("say hi") == "Simulated reply to: say hi"
    assert reply_text("one two three four five six seven eight nine").endswith("eight ...")
    assert reply_text("anything", override="Fixed.") == "Fixed."
    assert count_prompt_tokens(["a b  c", "d"]) == 4 and count_prompt_tokens([""]) == 1
    assert "".join(split_into_tokens("The capital is Paris.")) == "The capital is Paris."


def test_plans_honour_max_tokens_min_tokens_and_ignore_eos() -> None:
    text = "one two three"
    assert plan_generation(text, 5, 100).finish_reason is FinishReason.STOP
    cut = plan_generation(text, 5, 2)
    assert (cut.text, cut.finish_reason) == ("one two", FinishReason.LENGTH)
    padded = plan_generation(text, 5, 100, min_tokens=5)
    assert (padded.text, padded.finish_reason) == ("one two three one two", FinishReason.STOP)
    stretched = plan_generation(text, 5, 7, ignore_eos=True)
    assert (stretched.completion_tokens, stretched.finish_reason) == (7, FinishReason.LENGTH)


def test_tool_arguments_fill_required_parameters() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "verbose": {"type": "boolean"},
                },
                "required": ["city", "days", "unit"],
            },
        },
    }
    assert json.loads(placeholder_arguments(tool)) == {"city": "example", "days": 0, "unit": "celsius"}
    assert placeholder_arguments({"type": "function", "function": {"name": "now"}}) == "{}"


async def test_at_most_max_num_seqs_decode_and_the_rest_wait() -> None:
    engine = Engine(parse_command_line(["m", "--max-num-seqs", "2"], {"BERTH_SIM_TOKENS_PER_SECOND": "100"}))
    plan = GenerationPlan(prompt_tokens=3, pieces=("a", " b", " c"), finish_reason=FinishReason.STOP)
    peak_running = 0

    async def run_one() -> str:
        nonlocal peak_running
        pieces = []
        async with aclosing(engine.generate(plan)) as tokens:
            async for piece in tokens:
                peak_running = max(peak_running, engine.running)
                pieces.append(piece)
        return "".join(pieces)

    started = time.monotonic()
    tasks = [asyncio.create_task(run_one()) for _ in range(5)]
    async with asyncio.timeout(5):  # until all five have been admitted (two decode, three wait)
        while engine.running + engine.waiting < 5:  # noqa: ASYNC110 — the engine sets no event
            await asyncio.sleep(0)
    assert (engine.running, engine.waiting) == (2, 3)
    assert await asyncio.gather(*tasks) == ["a b c"] * 5
    # Three waves of three tokens at 100 tokens/s: about 90 ms, never less.
    assert time.monotonic() - started >= 0.085
    assert peak_running == 2 and (engine.running, engine.waiting) == (0, 0)
    assert _successes(engine, "stop") == 5


async def test_closing_a_stream_early_frees_its_slot_and_counts_an_abort() -> None:
    engine = Engine(parse_command_line(["m", "--max-num-seqs", "1"], {"BERTH_SIM_TOKENS_PER_SECOND": "0"}))
    plan = GenerationPlan(prompt_tokens=1, pieces=("a", " b", " c"), finish_reason=FinishReason.STOP)
    async with aclosing(engine.generate(plan)) as tokens:
        async for _ in tokens:
            break
    assert (engine.running, engine.waiting) == (0, 0)
    assert _successes(engine, "abort") == 1
