"""Engine: deterministic replies, token-by-token generation, vLLM-like queueing and Prometheus metrics."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from simulator.cli import EngineConfig
from simulator.prefix_cache import BLOCK_TOKENS, PrefixCache

_WORD = re.compile(r"\s*\S+")
_REPLY_WORDS = 8

# vLLM's own bucket boundaries, so dashboards and routing rules built on them read the same.
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
_PLACEHOLDERS: Mapping[str, Any] = {
    "string": "example",
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


class FinishReason(StrEnum):
    """Why a sequence ended, with vLLM's label values for `vllm:request_success_total`."""

    STOP = "stop"  # the reply ended by itself
    LENGTH = "length"  # max_tokens cut it short
    ABORT = "abort"  # the client went away first


@dataclass(frozen=True)
class GenerationPlan:
    """What one sequence will emit: the prompt it was charged for and the tokens it will produce."""

    prompt_tokens: int
    pieces: tuple[str, ...]
    finish_reason: FinishReason
    prompt_blocks: tuple[bytes, ...] = ()  # simulator/prefix_cache.py: what the prefix cache may hold of it

    @property
    def completion_tokens(self) -> int:
        return len(self.pieces)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def count_prompt_tokens(texts: Sequence[str]) -> int:
    """The simulator's tokenizer: one token per whitespace-separated word, at least one per prompt."""
    return max(1, sum(len(text.split()) for text in texts))


def split_into_tokens(text: str) -> list[str]:
    """Split a reply into word tokens that carry their leading space, so joining them restores the text."""
    return _WORD.findall(text) or [text]


def reply_text(prompt: str, override: str | None = None) -> str:
    """The deterministic reply to a prompt (BERTH_SIM_REPLY wins when set)."""
    if override is not None:
        return override
    if "capital of france" in prompt.lower():
        return "The capital of France is Paris."
    words = prompt.split()
    if not words:
        return "Simulated reply."
    suffix = " ..." if len(words) > _REPLY_WORDS else ""
    return f"Simulated reply to: {' '.join(words[:_REPLY_WORDS])}{suffix}"


def placeholder_arguments(tool: Mapping[str, Any]) -> str:
    """JSON arguments for a tool call: each required parameter with a placeholder of its type."""
    function = tool.get("function") or {}
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name in parameters.get("required") or []:
        schema = properties.get(name) or {}
        if schema.get("enum"):
            arguments[name] = schema["enum"][0]
        else:
            kind = schema.get("type", "string")
            arguments[name] = _PLACEHOLDERS.get(kind if isinstance(kind, str) else "string", "example")
    return json.dumps(arguments)


def plan_generation(
    text: str,
    prompt_tokens: int,
    max_tokens: int,
    *,
    min_tokens: int = 0,
    ignore_eos: bool = False,
) -> GenerationPlan:
    """Cut or stretch `text` to honour max_tokens, min_tokens and ignore_eos, as a sampler would."""
    natural = split_into_tokens(text)
    wanted = max_tokens if ignore_eos else max(len(natural), min_tokens)
    pieces = [natural[index % len(natural)] for index in range(min(wanted, max_tokens))]
    if len(pieces) > len(natural):
        # Repeating the reply past its end: keep a space between the copies.
        pieces = pieces[: len(natural)] + [
            piece if piece[:1].isspace() else f" {piece}" for piece in pieces[len(natural) :]
        ]
    stopped_by_itself = len(pieces) >= wanted and not ignore_eos
    reason = FinishReason.STOP if stopped_by_itself else FinishReason.LENGTH
    return GenerationPlan(prompt_tokens=prompt_tokens, pieces=tuple(pieces), finish_reason=reason)


class EngineMetrics:
    """vLLM's Prometheus metrics for one engine, in a registry of their own."""

    def __init__(self, model_name: str, engine_index: int = 0) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name, "engine": str(engine_index)}
        names = list(labels)

        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(name, documentation, names, registry=self.registry).labels(**labels)

        def histogram(name: str, documentation: str, buckets: Sequence[float]) -> Histogram:
            metric = Histogram(name, documentation, names, buckets=buckets, registry=self.registry)
            return metric.labels(**labels)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", names, registry=self.registry
        ).labels(**labels)
        # In tokens, as vLLM counts them: every prompt token looked up, and those found in the prefix cache.
        self.prefix_cache_queries = Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", names, registry=self.registry
        ).labels(**labels)
        self.prefix_cache_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", names, registry=self.registry
        ).labels(**labels)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", names, registry=self.registry
        ).labels(**labels)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*names, "finished_reason"],
            registry=self.registry,
        )
        # Created up front, as vLLM does, so every reason shows as 0 before it first happens.
        self.request_success = {
            reason: success.labels(**labels, finished_reason=reason.value) for reason in FinishReason
        }
        self.time_to_first_token = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _TTFT_BUCKETS
        )
        self.e2e_latency = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            _LATENCY_BUCKETS,
        )


class Engine:
    """Runs sequences: at most max_num_seqs decode at once, the rest wait in arrival order."""

    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._slots = asyncio.Semaphore(config.max_num_seqs)
        self._running = 0
        self._waiting = 0
        self._token_interval = 1.0 / config.tokens_per_second if config.tokens_per_second > 0 else 0.0
        self.metrics = EngineMetrics(config.served_model_name)
        self.prefix_cache = PrefixCache(config.prefix_cache_blocks)
        self._prefill = asyncio.Lock()  # one prompt's prefill at a time: the GPU's compute is one
        # Read at scrape time, so the gauges can never drift from the counts.
        self.metrics.running.set_function(lambda: self._running)
        self.metrics.waiting.set_function(lambda: self._waiting)
        self.metrics.kv_cache_usage.set_function(lambda: self._running / config.max_num_seqs)

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    async def generate(self, plan: GenerationPlan) -> AsyncGenerator[str, None]:
        """Yield the plan's tokens at the configured rate once a slot is free.

        Consume it with `contextlib.aclosing`: closing early releases the slot and counts an abort.
        """
        arrival = self._clock()
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        self._running += 1
        metrics = self.metrics
        finish_reason = FinishReason.ABORT
        try:
            metrics.queue_time.observe(self._clock() - arrival)
            if self._config.prefill_tokens_per_second > 0:
                await self._prefill_for(plan)
            if self._config.time_to_first_token > 0:
                await asyncio.sleep(self._config.time_to_first_token)
            decode_start = self._clock()
            for index, piece in enumerate(plan.pieces):
                if self._token_interval:
                    # Scheduled from the start, not from the previous token, so delays do not add up.
                    delay = decode_start + (index + 1) * self._token_interval - self._clock()
                    if delay > 0:
                        await asyncio.sleep(delay)
                else:
                    await asyncio.sleep(0)  # unlimited rate still lets other requests run
                if index == 0:
                    metrics.time_to_first_token.observe(self._clock() - arrival)
                    metrics.prompt_tokens.inc(plan.prompt_tokens)
                metrics.generation_tokens.inc()
                yield piece
            finish_reason = plan.finish_reason
        finally:
            self._running -= 1
            self._slots.release()
            metrics.request_success[finish_reason].inc()
            metrics.e2e_latency.observe(self._clock() - arrival)

    async def _prefill_for(self, plan: GenerationPlan) -> None:
        """The prompt's prefill at the configured rate, less its leading blocks found in the prefix cache."""
        async with self._prefill:
            cached = min(plan.prompt_tokens, self.prefix_cache.admit(plan.prompt_blocks) * BLOCK_TOKENS)
            self.metrics.prefix_cache_queries.inc(plan.prompt_tokens)
            self.metrics.prefix_cache_hits.inc(cached)
            await asyncio.sleep((plan.prompt_tokens - cached) / self._config.prefill_tokens_per_second)
