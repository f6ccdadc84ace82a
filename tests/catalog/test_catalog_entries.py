"""Every catalog entry loads, carries its metadata, typed and documented parameters, and sourced facts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from berth.kinds import ProcessKind
from catalog.definition import WorkflowDefinition
from catalog.entry import CATALOG_DIR, MODEL_ENTRY, ParameterType, find_entry, load_catalog
from catalog.render import render, resolve_values
from gateway.edge import routing

EXPECTED = {
    "GPT-OSS 20B",
    "GPT-OSS 120B",
    "Qwen3-Coder 30B",
    "Llama 4 Scout",
    "Nemotron 3 Super",
    "vLLM",
    "LiteLLM Model Gateway",
    "OpenCode",
    "SmolLM2 135M Instruct",
}
COMMON = {
    "Model",
    "MaxContextSize",
    "GpusPerNode",
    "Nodes",
    "Volume",
    "HfTokenSecret",
    "ApiKey",
    "ApiKeySecret",
    "Proxy",
    "Scope",
    "ExtraArgs",
    "ExtraEnv",
    "ExpertParallelism",
    "Image",
    "MinReplicas",
    "MaxReplicas",
}
MODEL_ENTRIES = sorted(n for n, e in load_catalog().items() if e.kind == MODEL_ENTRY)


def test_the_catalog_has_every_entry() -> None:
    assert set(load_catalog()) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entry_metadata(name: str) -> None:
    entry = find_entry(name)
    assert entry.category == "ML_AND_AI"
    assert "LLM" in entry.tags
    assert entry.description.endswith(".") and len(entry.description) > 30
    assert (CATALOG_DIR / entry.slug / "workflow.yaml.j2").is_file()
    for parameter in entry.parameters:
        assert parameter.help, f"{name}.{parameter.name} has no help"
        if not parameter.required and parameter.type not in (ParameterType.SECRET,):
            # Every optional parameter has a default, except GpusPerNode, which the memory model fills.
            assert parameter.default is not None or parameter.name == "GpusPerNode", parameter.name
        if parameter.type in (ParameterType.INT, ParameterType.FLOAT):
            assert parameter.min is not None and parameter.max is not None, (
                f"{name}.{parameter.name} is unbounded"
            )
        if parameter.default is not None and not parameter.required:
            assert (
                parameter.parse(parameter.default) == parameter.default
                or parameter.type is ParameterType.SECRET
            )


@pytest.mark.parametrize("name", MODEL_ENTRIES)
def test_model_entries_share_the_common_parameters(name: str) -> None:
    assert COMMON <= {p.name for p in find_entry(name).parameters}


@pytest.mark.parametrize("name", [n for n in MODEL_ENTRIES if n != "vLLM"])
def test_model_facts_cite_their_source(name: str) -> None:
    entry = find_entry(name)
    assert entry.model is not None
    text = (CATALOG_DIR / entry.slug / "entry.yaml").read_text()
    assert f"https://huggingface.co/{entry.model.repo}" in text  # the model card the facts come from
    assert entry.parameter("Model").default == f"hf://{entry.model.repo}"
    assert entry.parameter("MaxContextSize").max == entry.model.max_context


@pytest.mark.parametrize(
    ("name", "params_b", "dtype", "layers", "kv_heads", "head_dim", "default", "maximum"),
    [
        ("GPT-OSS 20B", 20.9, "mxfp4", 24, 8, 64, 131072, 131072),
        ("GPT-OSS 120B", 116.8, "mxfp4", 36, 8, 64, 131072, 131072),
        ("Qwen3-Coder 30B", 30.5, "bf16", 48, 4, 128, 262144, 1048576),
        ("Llama 4 Scout", 109.0, "bf16", 48, 8, 128, 131072, 10485760),
        ("Nemotron 3 Super", 120.6, "bf16", 88, 2, 128, 262144, 262144),
        ("SmolLM2 135M Instruct", 0.135, "bf16", 30, 3, 64, 8192, 8192),
    ],
)
def test_published_facts(
    name: str,
    params_b: float,
    dtype: str,
    layers: int,
    kv_heads: int,
    head_dim: int,
    default: int,
    maximum: int,
) -> None:
    facts = find_entry(name).model
    assert facts is not None
    assert (facts.parameters_b, facts.weight_dtype, facts.layers, facts.kv_heads, facts.head_dim) == (
        params_b,
        dtype,
        layers,
        kv_heads,
        head_dim,
    )
    assert (facts.default_context, facts.max_context) == (default, maximum)


def test_service_entries_have_their_own_parameters() -> None:
    gateway = find_entry("LiteLLM Model Gateway")
    assert gateway.kind == ProcessKind.GATEWAY
    # Every policy the routers register (gateway/edge/routing.py), the model entries' choice alike.
    assert gateway.parameter("RoutingPolicy").choices == tuple(sorted(routing.POLICIES))
    assert find_entry("vLLM").parameter("RoutingPolicy").choices == tuple(sorted(routing.POLICIES))
    assert {"Scope", "MasterKeySecret", "MinReplicas", "MaxReplicas"} <= {p.name for p in gateway.parameters}
    opencode = find_entry("OpenCode")
    assert opencode.kind == ProcessKind.OPENCODE
    assert opencode.parameter("MaxContextSize").default == 32768
    assert opencode.parameter("EndpointAuth").choices == ("identity", "api-key")
    assert {"Endpoint", "Model", "ServiceScope", "ApiKeySecret", "Volume", "Image"} <= {
        p.name for p in opencode.parameters
    }


def test_gated_entry_requires_its_token() -> None:
    scout = find_entry("Llama 4 Scout")
    assert scout.model is not None and scout.model.gated
    assert scout.parameter("HfTokenSecret").required
    assert [n for n, e in load_catalog().items() if e.model is not None and e.model.gated] == [
        "Llama 4 Scout"
    ]


def test_entries_are_found_by_slug_and_case() -> None:
    assert find_entry("qwen3-coder-30b").name == "Qwen3-Coder 30B"
    assert find_entry("gpt-oss 120b").name == "GPT-OSS 120B"


def test_a_gateway_definition_sized_above_one_process_is_refused() -> None:
    # The entry's bounds refuse it at submission; a definition built any other way meets this rule.
    entry = load_catalog()["LiteLLM Model Gateway"]
    data = render(entry, resolve_values(entry, {})).model_dump(mode="json")
    data["pool"] = {"min_replicas": 1, "max_replicas": 2}
    with pytest.raises(ValidationError, match="the gateway runs one process; MinReplicas/MaxReplicas other than 1"):
        WorkflowDefinition.model_validate(data)
