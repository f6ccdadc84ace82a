"""GPU memory model: weights + KV cache for the context + runtime overhead, within vLLM's
`--gpu-memory-utilization`; and how many 80 GB-class GPUs that implies."""

from __future__ import annotations

import math
from dataclasses import dataclass

from catalog.entry import ModelFacts

GB = 1_000_000_000
REFERENCE_GPU_GB = 80.0  # "80 GB-class" GPUs, as the documents count them
DEFAULT_UTILIZATION = 0.9
RUNTIME_OVERHEAD_GB = 2.0  # activations, CUDA graphs, NCCL buffers: per copy, measured-ish


@dataclass(frozen=True)
class MemoryNeed:
    weights_gb: float
    kv_cache_gb: float
    overhead_gb: float
    context: int

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.kv_cache_gb + self.overhead_gb


def kv_bytes_per_token(facts: ModelFacts) -> int:
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
