"""ExtraArgs/ExtraEnv may not set what Berth sets on each rank (issue 11 item 8): every spelling vLLM's
parser accepts is refused at submission in one line; every other flag, and each entry's own args, pass."""

from __future__ import annotations

import pytest

from berth.errors import UserInputError
from catalog.berth_flags import check_extra_args
from catalog.entry import find_entry
from catalog.render import render, resolve_values


def _refusal(entry: str, values: dict[str, str]) -> str:
    found = find_entry(entry)
    with pytest.raises(UserInputError) as caught:
        render(found, resolve_values(found, values))
    return str(caught.value)


@pytest.mark.parametrize(("extra_args", "expected"), [
    ("--host 0.0.0.0", "ExtraArgs may not set --host: Berth sets it"),
    ("--host=0.0.0.0", "ExtraArgs may not set --host: Berth sets it"),
    ("--enforce-eager --port 1", "ExtraArgs may not set --port: Berth sets it"),
    ("--api-key x", "ExtraArgs may not set --api-key: Berth sets it"),
    ("--config f.yaml", "ExtraArgs may not set --config: Berth sets it"),
    ("--served_model_name x", "ExtraArgs may not set --served_model_name (vLLM reads it as --served-model-name)"),
    ("--hos 0.0.0.0", "ExtraArgs may not set --hos (vLLM reads it as --host)"),
    ("--host.x 1", "ExtraArgs may not set --host.x (vLLM reads it as --host)"),
    ("--model /elsewhere", "ExtraArgs may not set --model"),
    ("--max-model-len 999999", "ExtraArgs may not set --max-model-len: Berth sets it from MaxContextSize"),
    ("-tp 8", "ExtraArgs may not set -tp (vLLM reads it as --tensor-parallel-size)"),
    ("-n2", "ExtraArgs may not set -n2 (vLLM reads it as --nnodes)"),
    ("--no-headless", "ExtraArgs may not set --no-headless (vLLM reads it as --headless)"),
    ("--data-parallel-hybrid-lb", "ExtraArgs may not set --data-parallel-hybrid-lb"),
    ("-dpb ray", "ExtraArgs may not set -dpb (vLLM reads it as --data-parallel-backend)"),
    ("--master-port=1", "ExtraArgs may not set --master-port"),
    ("--root-path /v", "ExtraArgs may not set --root-path: it would let callers around the copy's API key"),
    ("--grpc", "ExtraArgs may not set --grpc: it would let callers around the copy's API key"),
])
def test_flags_berth_sets_are_refused_in_one_line(extra_args: str, expected: str) -> None:
    message = _refusal("GPT-OSS 20B", {"ExtraArgs": extra_args})
    assert message.startswith(expected) and "\n" not in message


@pytest.mark.parametrize("variable", ["VLLM_API_KEY", "VLLM_USE_RUST_FRONTEND"])
def test_the_key_variables_are_refused_in_extra_env(variable: str) -> None:
    message = _refusal("vLLM", {"Model": "hf://Qwen/Qwen3-0.6B", "ExtraEnv": f"{variable}=x"})
    assert message.startswith(f"ExtraEnv may not set {variable}: ") and "\n" not in message


def test_other_flags_and_the_entries_own_args_pass() -> None:
    check_extra_args(["--tool-call-parser", "openai", "--enable-auto-tool-choice", "--model-impl", "vllm",
                      "--config-format", "hf", "--max-num-seqs", "4", "-q", "awq", "-O3", "--seed=0"])
    entry = find_entry("SmolLM2 135M Instruct")
    definition = render(entry, resolve_values(entry, {"ExtraArgs": "--max-num-seqs 4", "MaxContextSize": "4096"}))
    assert definition.replica is not None
    assert definition.replica.engine.args == ("--enforce-eager", "--enable-auto-tool-choice", "--tool-call-parser",
                                              "hermes")
    assert definition.replica.engine.extra_args == ("--max-num-seqs", "4")
    assert definition.replica.engine.max_model_len == 4096
