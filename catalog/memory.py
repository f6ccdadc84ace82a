"""GPU memory model: weights + KV cache for the context + runtime overhead, within vLLM's
`--gpu-memory-utilization`; and how many 80 GB-class GPUs that implies."""

from __future__ import annotations

import math
from dataclasses import dataclass

from catalog.entry import ModelFacts

GB = 1_000_000_000
REFERENCE_GPU_GB = 80.0  # "80 GB-class" GPUs, as the documents count them
DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default, which the entries keep
RUNTIME_OVERHEAD_GB = 2.0  # activations, CUDA graphs, NCCL buffers, Mamba state: per copy, an estimate
TABLE_CONTEXTS = (8192, 32768, 131072)  # the rows `catalog describe` shows, plus the entry's default
CONTEXT_STEP = 1024  # suggested contexts are rounded down to this, so they read well and stay safe
MIN_CONTEXT = 256  # the smallest MaxContextSize an entry accepts


@dataclass(frozen=True)
class MemoryNeed:
    """What one copy of a model needs, in GB (1e9 bytes), at one context size."""

    weights_gb: float
    kv_cache_gb: float
    overhead_gb: float
    context: int

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.kv_cache_gb + self.overhead_gb


def kv_bytes_per_token(facts: ModelFacts) -> int:
    """K and V (×2) for every layer that keeps a full-length cache."""
    layers = facts.kv_layers if facts.kv_layers is not None else facts.layers
    return layers * facts.kv_heads * facts.head_dim * 2 * facts.kv_dtype_bytes


def memory_need(facts: ModelFacts, context: int) -> MemoryNeed:
    return MemoryNeed(
        weights_gb=facts.weights_gb,
        kv_cache_gb=kv_bytes_per_token(facts) * context / GB,
        overhead_gb=RUNTIME_OVERHEAD_GB,
        context=context,
    )


def gpus_needed(total_gb: float, gpu_gb: float = REFERENCE_GPU_GB,
                utilization: float = DEFAULT_UTILIZATION) -> int:
    """GPUs of `gpu_gb` each to hold `total_gb`, rounded up to a power of two (tensor parallelism
    must divide the model's attention heads, which are powers of two in every catalog model)."""
    raw = max(1, math.ceil(total_gb / (gpu_gb * utilization)))
    return 1 << (raw - 1).bit_length()


def fits(total_gb: float, gpus: int, gpu_gb: float, utilization: float = DEFAULT_UTILIZATION) -> bool:
    return total_gb <= gpus * gpu_gb * utilization


def max_context_that_fits(facts: ModelFacts, gpus: int, gpu_gb: float,
                          utilization: float = DEFAULT_UTILIZATION) -> int | None:
    """The largest MaxContextSize (a multiple of 1024, at most the model's maximum) whose need fits
    `gpus` GPUs of `gpu_gb` each; None when even the weights do not fit."""
    budget_gb = gpus * gpu_gb * utilization - facts.weights_gb - RUNTIME_OVERHEAD_GB
    if budget_gb <= 0:
        return None
    tokens = int(budget_gb * GB // kv_bytes_per_token(facts))
    tokens = min(tokens, facts.max_context)
    if tokens != facts.max_context:
        tokens -= tokens % CONTEXT_STEP
    return tokens if tokens >= MIN_CONTEXT else None


@dataclass(frozen=True)
class MemoryRow:
    """One row of `catalog describe`'s table: the need at a context and the 80 GB GPUs it implies."""

    context: int
    weights_gb: float
    kv_cache_gb: float
    overhead_gb: float
    total_gb: float
    gpus_80gb: int
    default: bool

    def as_json(self) -> dict[str, float | int | bool]:
        return {"context": self.context, "weights_gb": self.weights_gb, "kv_cache_gb": self.kv_cache_gb,
                "overhead_gb": self.overhead_gb, "total_gb": self.total_gb, "gpus_80gb": self.gpus_80gb,
                "default": self.default}


def memory_table(facts: ModelFacts) -> list[MemoryRow]:
    """8k, 32k, 128k and the default context (those the model accepts), smallest first."""
    contexts = sorted({c for c in TABLE_CONTEXTS if c <= facts.max_context} | {facts.default_context})
    rows = []
    for context in contexts:
        need = memory_need(facts, context)
        rows.append(MemoryRow(context=context, weights_gb=round(need.weights_gb, 1),
                              kv_cache_gb=round(need.kv_cache_gb, 1), overhead_gb=need.overhead_gb,
                              total_gb=round(need.total_gb, 1), gpus_80gb=gpus_needed(need.total_gb),
                              default=context == facts.default_context))
    return rows
