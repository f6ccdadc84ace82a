"""The simulator reads vLLM's `serve` command line and the BERTH_SIM_* variables."""

from __future__ import annotations

import shlex

import pytest

from simulator.cli import CommandLineError, parse_command_line

LEADER = (
    "openai/gpt-oss-120b --served-model-name openai/gpt-oss-120b --host 0.0.0.0 --port 8123"
    " --max-model-len 32k --tensor-parallel-size 4 -pp 2 --nnodes 2 --node-rank 0"
    " --master-addr 10.0.0.1 --master-port 29500 --enable-expert-parallel --gpu-memory-utilization 0.92"
    " --download-dir /scratch/weights --enforce-eager --enable-auto-tool-choice --tool-call-parser openai"
    " --dtype bfloat16 --trust-remote-code --max-num-seqs 64"
    " --kv-cache-dtype fp8 --disable-log-requests --swap-space=4"
)
HEADLESS_DP = (
    "deepseek-ai/DeepSeek-V3 -tp 8 -dp 4 --data-parallel-size-local 2 --data-parallel-address 10.0.0.1"
    " --data-parallel-rpc-port 13345 --data-parallel-start-rank 2 --headless --enable-expert-parallel"
)


def test_realistic_multi_node_leader_command_line() -> None:
    config = parse_command_line(shlex.split(LEADER), {})
    assert config.model == config.served_model_name == "openai/gpt-oss-120b"
    assert (config.host, config.port) == ("0.0.0.0", 8123)
    assert config.max_model_len == 32000
    assert (config.tensor_parallel_size, config.pipeline_parallel_size) == (4, 2)
    assert (config.nnodes, config.node_rank, config.master_addr, config.master_port) == (
        2,
        0,
        "10.0.0.1",
        29500,
    )
    assert config.enable_expert_parallel and config.enforce_eager and config.trust_remote_code
    assert config.enable_auto_tool_choice and config.tool_call_parser == "openai"
    assert config.gpu_memory_utilization == 0.92 and config.dtype == "bfloat16"
    assert config.download_dir == "/scratch/weights"
    assert config.max_num_seqs == 64
    assert not config.headless
    assert config.ignored_args == ("--kv-cache-dtype fp8", "--disable-log-requests", "--swap-space=4")


def test_realistic_headless_data_parallel_rank() -> None:
    config = parse_command_line(shlex.split(HEADLESS_DP), {})
    assert config.headless
    assert (config.tensor_parallel_size, config.data_parallel_size) == (8, 4)
    assert config.data_parallel_size_local == 2
    assert (config.data_parallel_address, config.data_parallel_rpc_port) == ("10.0.0.1", 13345)
    assert config.data_parallel_start_rank == 2
    assert config.ignored_args == ()


def test_defaults_and_simulator_knobs_from_the_environment() -> None:
    config = parse_command_line(["m"], {})
    assert (config.host, config.port, config.max_num_seqs, config.tokens_per_second) == (
        "127.0.0.1",
        8000,
        8,
        200,
    )
    assert config.exit_after is None and config.reply is None and config.startup_delay == 0

    environ = {
        "BERTH_SIM_STARTUP_DELAY": "1.5",
        "BERTH_SIM_TOKENS_PER_SECOND": "0",
        "BERTH_SIM_MAX_NUM_SEQS": "3",
        "BERTH_SIM_REPLY": "Fixed answer.",
        "BERTH_SIM_EXIT_AFTER": "2",
        "BERTH_SIM_EXIT_CODE": "7",
        "BERTH_SIM_TTFT": "0.25",
    }
    config = parse_command_line(["m"], environ)
    assert (config.startup_delay, config.tokens_per_second, config.max_num_seqs) == (1.5, 0, 3)
    assert (config.reply, config.exit_after, config.exit_code, config.time_to_first_token) == (
        "Fixed answer.", 2, 7, 0.25,
    )  # fmt: skip
    # The flag wins over the variable, as in vLLM.
    assert parse_command_line(["m", "--max-num-seqs", "5"], environ).max_num_seqs == 5


def test_vllm_spellings_underscores_equals_and_lengths() -> None:
    config = parse_command_line(
        ["m", "--max_model_len=1K", "--served-model-name", "a", "b", "--no-enforce-eager"], {}
    )
    assert config.max_model_len == 1024
    assert config.served_model_names == ("a", "b") and config.served_model_name == "a"
    assert parse_command_line(["--model", "m2"], {}).model == "m2"


@pytest.mark.parametrize(
    ("argv", "environ", "complaint"),
    [
        ([], {}, "model"),
        (["m", "--enable-auto-tool-choice"], {}, "--tool-call-parser"),
        (["m", "--port", "eighty"], {}, "--port"),
        (["m", "--max-model-len", "lots"], {}, "lots"),
        (["m"], {"BERTH_SIM_TOKENS_PER_SECOND": "fast"}, "BERTH_SIM_TOKENS_PER_SECOND"),
        (["m"], {"BERTH_SIM_MAX_NUM_SEQS": "0"}, "max-num-seqs"),
    ],
)
def test_invalid_input_is_refused_with_a_reason(
    argv: list[str], environ: dict[str, str], complaint: str
) -> None:
    with pytest.raises(CommandLineError, match=complaint):
        parse_command_line(argv, environ)
