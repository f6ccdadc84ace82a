"""Each submission error the catalog raises, with its message; and --values / --values-file parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from berth.errors import UserInputError
from catalog.definition import WorkflowDefinition
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from catalog.values import load_values_file, parse_values


def start(name: str, raw: dict[str, Any]) -> WorkflowDefinition:
    entry = find_entry(name)
    return render(entry, resolve_values(entry, raw))


def refused(name: str, raw: dict[str, Any]) -> str:
    with pytest.raises(UserInputError) as caught:
        start(name, raw)
    return str(caught.value)


def test_unknown_parameter_suggests_the_closest_name() -> None:
    message = refused("GPT-OSS 20B", {"MaxContextSise": "8192"})
    assert message.startswith("'GPT-OSS 20B' has no parameter 'MaxContextSise'. Did you mean MaxContextSize?")
    assert "Its parameters: Model, MaxContextSize" in message
    assert "Did you mean GpusPerNode?" in refused("Qwen3-Coder 30B", {"GPUsPerNode": "2"})
    assert "Did you mean" not in refused("GPT-OSS 20B", {"Zzz": "1"})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"Nodes": "two"}, "Nodes must be a whole number, not 'two'."),
        ({"MaxContextSize": "8k"}, "MaxContextSize must be a whole number, not '8k'."),
        ({"Proxy": "maybe"}, "Proxy must be true or false, not 'maybe'."),
        ({"Scope": "world"}, "Scope must be one of user, group, organization, public, not 'world'."),
        ({"ExpertParallelism": "on"}, "ExpertParallelism must be one of auto, true, false, not 'on'."),
        ({"MaxContextSize": 1.5}, "MaxContextSize must be a whole number, not '1.5'."),
    ],
)
def test_wrong_type(raw: dict[str, Any], expected: str) -> None:
    assert refused("GPT-OSS 20B", raw) == expected


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("GPT-OSS 20B", {"Nodes": "0"}, "Nodes=0 is below its minimum 1."),
        ("GPT-OSS 20B", {"Nodes": "65"}, "Nodes=65 is above its maximum 64."),
        ("GPT-OSS 20B", {"GpusPerNode": "17"}, "GpusPerNode=17 is above its maximum 16."),
        ("GPT-OSS 20B", {"MaxContextSize": "100"}, "MaxContextSize=100 is below its minimum 256."),
        ("GPT-OSS 20B", {"MinReplicas": "-1"}, "MinReplicas=-1 is below its minimum 0."),
        # Issue 12: both given and contradictory ran MinReplicas copies silently.
        ("GPT-OSS 20B", {"MinReplicas": "5", "MaxReplicas": "2"},
         "MaxReplicas (2) is below MinReplicas (5): raise MaxReplicas or lower MinReplicas."),
        # Above the model's maximum: the maximum is named, as a plain number.
        ("GPT-OSS 20B", {"MaxContextSize": "262144"}, "MaxContextSize=262144 is above its maximum 131072."),
        (
            "Qwen3-Coder 30B",
            {"MaxContextSize": "2000000"},
            "MaxContextSize=2000000 is above its maximum 1048576.",
        ),
        (
            "vLLM",
            {"Model": "hf://a/b", "GpuMemoryUtilization": "0.99"},
            "GpuMemoryUtilization=0.99 is above its maximum 0.95.",
        ),
    ],
)
def test_out_of_bounds(name: str, raw: dict[str, Any], expected: str) -> None:
    assert refused(name, raw) == expected


@pytest.mark.parametrize(
    "model",
    [
        "openai/gpt-oss-20b",
        "hf://gpt-oss-20b",
        "hf://openai/",
        "https://huggingface.co/x/y",
        "hf://org/na me",
        "",
    ],
)
def test_malformed_model(model: str) -> None:
    message = refused("vLLM", {"Model": model})
    assert message.startswith("Model must ")
    assert "hf://openai/gpt-oss-20b" in message and f"not '{model}'" in message


def test_general_entry_requires_model() -> None:
    message = refused("vLLM", {})
    assert message.startswith("'vLLM' needs Model (Hugging Face URI of the weights")
    assert "Add --values Model=" in message


def test_model_entry_serves_only_its_own_repository() -> None:
    message = refused("GPT-OSS 20B", {"Model": "hf://Qwen/Qwen3-0.6B"})
    assert message == (
        "'GPT-OSS 20B' serves openai/gpt-oss-20b; Model=hf://Qwen/Qwen3-0.6B names another "
        "repository. Pin a revision with Model=hf://openai/gpt-oss-20b@REVISION, or start the "
        "vLLM entry for other models."
    )
    pinned = start("GPT-OSS 20B", {"Model": "hf://openai/gpt-oss-20b@abc123"})
    assert pinned.weights is not None and pinned.weights.revision == "abc123"


def test_gated_model_refuses_to_start_without_a_token() -> None:
    message = refused("Llama 4 Scout", {})
    assert message.startswith("'Llama 4 Scout' needs HfTokenSecret (Llama 4 Scout is gated")
    assert "secret://user/hf-token" in message and "Add --values HfTokenSecret=" in message
    definition = start("Llama 4 Scout", {"HfTokenSecret": "secret://user/hf-token"})
    assert definition.weights is not None and definition.weights.hf_token_secret == "secret://user/hf-token"


def test_secret_references() -> None:
    assert refused("Llama 4 Scout", {"HfTokenSecret": "hf_abc"}) == (
        "HfTokenSecret must be a secret reference like secret://user/NAME, not 'hf_abc'."
    )
    message = refused("GPT-OSS 20B", {"ApiKeySecret": "secret://group/litellm"})
    assert message.startswith("ApiKeySecret must be a user-scoped secret reference like secret://user/NAME")
    assert "group and organization secrets are refused for environment variables" in message


def test_api_key_must_be_a_litellm_key() -> None:
    message = refused("GPT-OSS 20B", {"ApiKey": "hunter2"})
    assert (
        message.startswith("ApiKey must be a value like sk-my-long-random-key") and "not 'hunter2'" in message
    )
    assert start("GPT-OSS 20B", {"ApiKey": "sk-0123456789abcdef"}).api_key == "sk-0123456789abcdef"


def test_extra_env_and_args_are_checked() -> None:
    message = refused("Nemotron 3 Super", {"ExtraEnv": "NCCL_SOCKET_IFNAME eth0"})
    assert message == (
        "ExtraEnv must be space-separated NAME=VALUE pairs; 'NCCL_SOCKET_IFNAME' is not one. "
        "Example: ExtraEnv='NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5'."
    )
    assert refused("GPT-OSS 20B", {"ExtraArgs": "--chat-template 'x"}).startswith(
        "ExtraArgs cannot be split like a shell command line (No closing quotation)"
    )


def test_volume_and_image_names() -> None:
    assert refused("GPT-OSS 20B", {"Volume": "../etc"}).startswith("Volume must be a value like my-models")
    assert refused("GPT-OSS 20B", {"Image": "a b"}).startswith("Image must be a value like")


def test_opencode_cross_checks() -> None:
    assert refused("OpenCode", {"EndpointAuth": "api-key"}).startswith(
        "EndpointAuth=api-key needs ApiKeySecret"
    )
    assert refused("OpenCode", {"Model": "hf://openai/gpt-oss-20b"}).startswith(
        "Model must be a value like openai/gpt-oss-20b"
    )
    assert refused("OpenCode", {"Endpoint": "ftp://x"}).startswith("Endpoint must be a value like https://")
    message = refused("OpenCode", {"ApiKeySecret": "secret://organization/key"})
    assert message.startswith("ApiKeySecret must be a user-scoped secret reference like secret://user/NAME")


def test_values_accept_commas_and_quoting() -> None:
    values = parse_values(
        "Nodes=2,GpusPerNode=4,ExtraEnv='NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5',"
        "ExtraArgs='--tool-call-parser openai --enable-auto-tool-choice'"
    )
    assert values == {
        "Nodes": "2",
        "GpusPerNode": "4",
        "ExtraEnv": "NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5",
        "ExtraArgs": "--tool-call-parser openai --enable-auto-tool-choice",
    }
    definition = start("Nemotron 3 Super", values)
    assert definition.replica is not None
    engine = definition.replica.engine
    assert engine.extra_env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5"}
    assert engine.extra_args == ("--tool-call-parser", "openai", "--enable-auto-tool-choice")
    # The documents' unquoted form: the value's own `=` stays in the value.
    assert parse_values("Nodes=2,GpusPerNode=4,ExtraEnv=NCCL_SOCKET_IFNAME=eth0")["ExtraEnv"] == (
        "NCCL_SOCKET_IFNAME=eth0"
    )
    # A comma inside quotes, or not followed by Key=, belongs to the value.
    assert parse_values('ExtraArgs="--a x,y",Nodes=2') == {"ExtraArgs": "--a x,y", "Nodes": "2"}
    assert parse_values("ExtraArgs=--a x,y,Nodes=2") == {"ExtraArgs": "--a x,y", "Nodes": "2"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("MaxContextSize", "--values entry 'MaxContextSize' is not KEY=VALUE."),
        ("ExtraArgs='--x", "--values has an unclosed ' quote"),
        ("Nodes=1,Nodes=2", "--values sets Nodes twice."),
    ],
)
def test_malformed_values(text: str, expected: str) -> None:
    with pytest.raises(UserInputError) as caught:
        parse_values(text)
    assert str(caught.value).startswith(expected)


def test_values_file(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(
        "Nodes: 2\nGpusPerNode: 4\nProxy: false\n"
        "ExtraEnv: {NCCL_SOCKET_IFNAME: eth0, NCCL_IB_HCA: mlx5}\n"
        "ExtraArgs: [--tool-call-parser, openai, --enable-auto-tool-choice]\n"
    )
    definition = start("Nemotron 3 Super", load_values_file(path))
    assert definition.replica is not None and definition.proxy is False
    assert definition.replica.engine.extra_env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5"}
    assert definition.replica.engine.extra_args == (
        "--tool-call-parser",
        "openai",
        "--enable-auto-tool-choice",
    )
    path.write_text("- Nodes\n")
    with pytest.raises(UserInputError, match="must be a mapping of parameter names to values"):
        load_values_file(path)
    path.write_text("Nodes: [2\n")
    with pytest.raises(UserInputError, match="is not valid YAML"):
        load_values_file(path)
    with pytest.raises(UserInputError, match="Cannot read --values-file"):
        load_values_file(tmp_path / "missing.yaml")
    with pytest.raises(UserInputError, match="Nodes takes a single value"):
        start("GPT-OSS 20B", {"Nodes": [1, 2]})
