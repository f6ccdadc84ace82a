"""Every entry renders at its defaults and with typical overrides into the definitions stored in golden/.

Regenerate after an intended change with `BERTH_UPDATE_GOLDEN=1 pytest tests/catalog/test_catalog_golden.py`
and review the diff: these files are what the workflows will be asked to run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog.entry import find_entry, load_catalog
from catalog.render import render, resolve_values

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("BERTH_UPDATE_GOLDEN") == "1"
TOKEN = {"HfTokenSecret": "secret://user/hf-token"}

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("GPT-OSS 20B", "defaults", {}),
    (
        "GPT-OSS 20B",
        "tools-public-32k",
        {
            "MaxContextSize": "32768",
            "Scope": "public",
            "ApiKey": "sk-berth-golden-key-0001",
            "Proxy": "true",
            "ExtraArgs": "--tool-call-parser openai --enable-auto-tool-choice",
        },
    ),
    ("GPT-OSS 20B", "gateway-pool", {"Proxy": "false", "MinReplicas": "0", "MaxReplicas": "4"}),
    ("GPT-OSS 120B", "defaults", {}),
    (
        "GPT-OSS 120B",
        "volume-two-gpus",
        {"Volume": "my-models", "GpusPerNode": "2", "ApiKeySecret": "secret://user/litellm-key"},
    ),
    ("Qwen3-Coder 30B", "defaults", {}),
    ("Qwen3-Coder 30B", "one-gpu-64k", {"MaxContextSize": "65536"}),
    ("Qwen3-Coder 30B", "yarn-1m", {"MaxContextSize": "1048576"}),
    ("Llama 4 Scout", "defaults", TOKEN),
    (
        "Llama 4 Scout",
        "pinned-32k",
        {**TOKEN, "MaxContextSize": "32768", "Model": "hf://meta-llama/Llama-4-Scout-17B-16E-Instruct@main"},
    ),
    ("Nemotron 3 Super", "defaults", {}),
    (
        "Nemotron 3 Super",
        "two-nodes",
        {"Nodes": "2", "GpusPerNode": "4", "ExtraEnv": "NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5"},
    ),
    ("SmolLM2 135M Instruct", "defaults", {}),
    ("SmolLM2 135M Instruct", "one-gpu", {"GpusPerNode": "1", "Scope": "user", "MaxContextSize": "4096"}),
    (
        "SmolLM2 135M Instruct",
        "sites",  # issue 36: the site values, rendered as replica.sites (the lists split at commas)
        {"MaxReplicas": "4", "PreferredSite": "eu-west", "AllowedSites": "eu-west,eu-north", "Residency": "eu",
         "FailoverSites": "eu-north", "MaxCopiesPerSite": "3", "MinSites": "2", "RoutingPolicy": "site_local"},
    ),
    ("vLLM", "defaults", {"Model": "hf://Qwen/Qwen3-0.6B"}),
    (
        "vLLM",
        "sized",
        {
            "Model": "hf://Qwen/Qwen3-30B-A3B@0123abc",
            "GpusPerNode": "4",
            "GpuMemoryGb": "80",
            "MaxContextSize": "32768",
            "ExpertParallelism": "true",
            "GpuMemoryUtilization": "0.85",
            "HfTokenSecret": "secret://user/hf-token",
            "Image": "vllm/vllm-openai:v0.11.0",
        },
    ),
    ("LiteLLM Model Gateway", "defaults", {}),
    (
        "LiteLLM Model Gateway",
        "public-ttft",
        {
            "Scope": "public",
            "RoutingPolicy": "lowest_ttft",
            "MasterKeySecret": "secret://user/gateway-key",
            "DiscoveryInterval": "30",
        },
    ),
    ("OpenCode", "defaults", {}),
    (
        "OpenCode",
        "attach-api-key",
        {
            "Endpoint": "https://berth.example/endpoints/ep-1",
            "ServiceScope": "public",
            "MaxContextSize": "131072",
            "Model": "openai/gpt-oss-20b",
            "ApiKeySecret": "secret://user/litellm-key",
            "EndpointAuth": "api-key",
            "Volume": "my-workspace",
        },
    ),
]


def test_every_entry_has_a_golden_case_at_its_defaults() -> None:
    assert {name for name, case, _ in CASES if case == "defaults"} == set(load_catalog())


@pytest.mark.parametrize(("name", "case", "raw"), CASES, ids=[f"{n}:{c}" for n, c, _ in CASES])
def test_golden_definition(name: str, case: str, raw: dict[str, Any]) -> None:
    entry = find_entry(name)
    definition = render(entry, resolve_values(entry, raw))
    rendered = definition.model_dump(mode="json")
    path = GOLDEN / f"{entry.slug}.{case}.yaml"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"{path.name} is missing; run with BERTH_UPDATE_GOLDEN=1 to create it")
        path.write_text(yaml.safe_dump(rendered, sort_keys=False, allow_unicode=True))
    assert rendered == yaml.safe_load(path.read_text()), (
        f"{name} ({case}) renders differently from {path.name}; "
        "if intended, regenerate with BERTH_UPDATE_GOLDEN=1"
    )
