"""The memory model pins the documents' figures: what each entry needs, and the GPUs that implies."""

from __future__ import annotations

import pytest

from catalog.entry import ModelFacts, find_entry
from catalog.memory import (
    DEFAULT_UTILIZATION,
    REFERENCE_GPU_GB,
    RUNTIME_OVERHEAD_GB,
    fits,
    gpus_needed,
    kv_bytes_per_token,
    max_context_that_fits,
    memory_need,
    memory_table,
)
from catalog.render import render, resolve_values


def facts(name: str) -> ModelFacts:
    model = find_entry(name).model
    assert model is not None
    return model


def test_kv_cache_formula() -> None:
    # layers × KV heads × head dim × 2 (K and V) × 2 bytes (bf16 cache)
    assert kv_bytes_per_token(facts("Qwen3-Coder 30B")) == 48 * 4 * 128 * 2 * 2
    assert kv_bytes_per_token(facts("SmolLM2 135M Instruct")) == 30 * 3 * 64 * 2 * 2
    # Hybrid and sliding-window models count only the layers with a full-length cache.
    assert kv_bytes_per_token(facts("GPT-OSS 20B")) == 12 * 8 * 64 * 2 * 2
    assert kv_bytes_per_token(facts("Nemotron 3 Super")) == 8 * 2 * 128 * 2 * 2


def test_qwen3_coder_needs_two_80gb_gpus_at_its_default_context() -> None:
    qwen = facts("Qwen3-Coder 30B")
    need = memory_need(qwen, qwen.default_context)
    assert (
        need.weights_gb == 61.1
        and round(need.kv_cache_gb, 1) == 25.8
        and need.overhead_gb == RUNTIME_OVERHEAD_GB
    )
    assert round(need.total_gb, 1) == 88.9
    assert gpus_needed(need.total_gb) == 2  # 2 × 80 GB = the documents' 160 GB
    assert not fits(need.total_gb, 1, REFERENCE_GPU_GB)
    assert fits(need.total_gb, 1, 141)  # "runs on one card that has the memory" (an H200)


def test_qwen3_coder_fits_one_80gb_gpu_at_a_smaller_context() -> None:
    qwen = facts("Qwen3-Coder 30B")
    for context in (8192, 32768, 65536):
        assert gpus_needed(memory_need(qwen, context).total_gb) == 1, context
    assert gpus_needed(memory_need(qwen, 131072).total_gb) == 2
    assert max_context_that_fits(qwen, 1, 80) == 90112
    values = resolve_values(find_entry("Qwen3-Coder 30B"), {"MaxContextSize": "65536"})
    assert values["GpusPerNode"] == 1


def test_gpt_oss_20b_fits_one_gpu() -> None:
    gpt = facts("GPT-OSS 20B")
    need = memory_need(gpt, gpt.default_context)
    assert round(need.total_gb, 1) == 19.0
    assert gpus_needed(need.total_gb) == 1


@pytest.mark.parametrize(
    ("name", "total_gb", "gpus"),
    [
        ("GPT-OSS 20B", 19.0, 1),
        ("GPT-OSS 120B", 71.8, 1),  # the model card: "fits into a single 80GB GPU"
        ("Qwen3-Coder 30B", 88.9, 2),
        ("Llama 4 Scout", 245.8, 4),
        ("Nemotron 3 Super", 245.3, 4),
        ("SmolLM2 135M Instruct", 2.5, 1),  # on a GPU; its entry defaults to the CPU engine
    ],
)
def test_need_at_the_default_context(name: str, total_gb: float, gpus: int) -> None:
    model = facts(name)
    need = memory_need(model, model.default_context)
    assert round(need.total_gb, 1) == total_gb
    assert gpus_needed(need.total_gb) == gpus


@pytest.mark.parametrize(
    "name", ["GPT-OSS 20B", "GPT-OSS 120B", "Qwen3-Coder 30B", "Llama 4 Scout", "Nemotron 3 Super"]
)
def test_gpus_per_node_defaults_to_what_the_memory_needs(name: str) -> None:
    entry = find_entry(name)
    model = facts(name)
    raw = {"HfTokenSecret": "secret://user/hf-token"} if model.gated else {}
    values = resolve_values(entry, raw)
    assert values["GpusPerNode"] == gpus_needed(memory_need(model, model.default_context).total_gb)
    definition = render(entry, values)
    assert definition.replica is not None
    per_gpu = definition.replica.gpu_memory_gb
    assert per_gpu * definition.replica.gpus_per_node == pytest.approx(
        memory_need(model, model.default_context).total_gb, abs=0.5
    )
    assert per_gpu <= REFERENCE_GPU_GB * DEFAULT_UTILIZATION


def test_nodes_split_the_need() -> None:
    values = resolve_values(find_entry("Nemotron 3 Super"), {"Nodes": "2"})
    assert values["GpusPerNode"] == 2  # 245 GB over two nodes: two 80 GB GPUs each
    definition = render(
        find_entry("Nemotron 3 Super"),
        resolve_values(find_entry("Nemotron 3 Super"), {"Nodes": "2", "GpusPerNode": "4"}),
    )
    assert definition.replica is not None
    assert (definition.replica.nodes, definition.replica.gpus_per_node) == (2, 4)
    assert definition.replica.gpu_memory_gb == pytest.approx(245.3 / 8, abs=0.1)


def test_lowering_the_context_lowers_the_need() -> None:
    for name in ("GPT-OSS 120B", "Qwen3-Coder 30B", "Llama 4 Scout"):
        model = facts(name)
        needs = [memory_need(model, c).total_gb for c in (8192, 32768, 131072)]
        assert needs == sorted(needs) and needs[0] < needs[-1]


def test_max_context_that_fits() -> None:
    scout = facts("Llama 4 Scout")
    assert max_context_that_fits(scout, 2, 80) is None  # 218 GB of weights never fit 144 GB
    fitted = max_context_that_fits(scout, 4, 80)
    assert fitted is not None and fitted % 1024 == 0
    assert fits(memory_need(scout, fitted).total_gb, 4, 80)
    assert not fits(memory_need(scout, fitted + 1024).total_gb, 4, 80)
    smol = facts("SmolLM2 135M Instruct")
    assert max_context_that_fits(smol, 1, 80) == smol.max_context  # capped at the model's maximum


def test_memory_table_rows() -> None:
    rows = memory_table(facts("Qwen3-Coder 30B"))
    assert [r.context for r in rows] == [8192, 32768, 131072, 262144]
    assert [r.gpus_80gb for r in rows] == [1, 1, 2, 2]
    assert [r.default for r in rows] == [False, False, False, True]
    assert rows[-1].total_gb == 88.9 and rows[-1].weights_gb == 61.1 and rows[-1].kv_cache_gb == 25.8
    smol = memory_table(facts("SmolLM2 135M Instruct"))
    assert [r.context for r in smol] == [8192] and smol[0].default
    scout = memory_table(facts("Llama 4 Scout"))
    assert [r.context for r in scout] == [8192, 32768, 131072] and scout[-1].default
    assert [r.gpus_80gb for r in scout] == [4, 4, 4]
