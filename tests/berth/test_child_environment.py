"""The allow-lists of berth.child_environment: what a child inherits, and what a user may add to a rank."""

from __future__ import annotations

import pytest

from berth.child_environment import (
    MAX_USER_VALUE_CHARS,
    MAX_USER_VARIABLES,
    engine_environment,
    inherit,
    user_environment_problem,
    user_variable_problem,
)

AGENT = {
    "PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
    "BERTH_TOKEN": "admin-token", "BERTH_STATE_DIR": "/var/lib/berth", "BERTH_API_URL": "http://api",
    "BERTH_SIM_REPLY": "hi", "HF_TOKEN": "hf_secret", "HF_HUB_OFFLINE": "1", "VLLM_API_KEY": "k",
    "NCCL_SOCKET_IFNAME": "ib0", "LD_PRELOAD": "/x.so", "PYTHONPATH": "/x", "DATABASE_URL": "postgres://",
}


@pytest.mark.parametrize("name", ["VLLM_FOO", "VLLM_CPU_KVCACHE_SPACE", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA",
                                  "OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTORCH_CUDA_ALLOC_CONF",
                                  "HF_HUB_OFFLINE", "CUDA_LAUNCH_BLOCKING", "TOKENIZERS_PARALLELISM"])
def test_engine_knobs_are_allowed(name: str) -> None:
    assert user_variable_problem(name) is None


@pytest.mark.parametrize(("name", "why"), [
    ("PYTHONWARNINGS", "Python"), ("PYTHONPATH", "Python"), ("PERL5OPT", "Perl"), ("PERL5LIB", "Perl"),
    ("BROWSER", "program"), ("LD_PRELOAD", "loader"), ("LD_LIBRARY_PATH", "loader"),
    ("BERTH_TOKEN", "Berth"), ("BERTH_SIM_REPLY", "Berth"), ("CUDA_VISIBLE_DEVICES", "GPUs"),
    ("HF_TOKEN", "credential"), ("VLLM_API_KEY", "credential"), ("HF_HUB_TOKEN", "credential"),
    ("VLLM_LOGGING_CONFIG_PATH", "file"), ("NCCL_NET_PLUGIN", "file"), ("NCCL_DEBUG_FILE", "file"),
    ("VLLM_CACHE_ROOT", "file"), ("OMP_TOOL_LIBRARIES", "file"), ("TRITON_PTXAS_PATH", "file"),
    ("CUDA_MPS_PIPE_DIRECTORY", "file"), ("TORCH_LOGS_OUT", "file"), ("TRITON_CACHE_MANAGER", "file"),
    ("HF_DATASETS_TRUST_REMOTE_CODE", "code"), ("VLLM_SERVER_DEV_MODE", "routes"),
    ("BASH_ENV", "not an engine setting"), ("HOME", "file"), ("pythonwarnings", "Python"),
])
def test_dangerous_names_are_refused_with_the_reason(name: str, why: str) -> None:
    problem = user_variable_problem(name)
    assert problem is not None and why in problem


def test_a_refusal_is_one_sentence_naming_the_variable() -> None:
    problem = user_environment_problem({"NCCL_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "all:0:antigravity.x:0:0"})
    assert problem is not None and problem.startswith("ExtraEnv may not set PYTHONWARNINGS: ")
    assert "\n" not in problem and problem.endswith(".")
    assert user_environment_problem({"NCCL_SOCKET_IFNAME": "lo", "VLLM_FOO": "1"}) is None


def test_sizes_are_bounded() -> None:
    many = {f"VLLM_X{i}": "1" for i in range(MAX_USER_VARIABLES + 1)}
    assert "at most" in (user_environment_problem(many) or "")
    assert "characters" in (user_environment_problem({"VLLM_X": "a" * (MAX_USER_VALUE_CHARS + 1)}) or "")


def test_a_rank_inherits_no_credential_and_no_berth_setting() -> None:
    rank = engine_environment(AGENT)
    # PYTHONPATH is the operator's (where Berth is); a user may not set it (test above).
    assert rank == {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": "/x", "HF_HUB_OFFLINE": "1", "NCCL_SOCKET_IFNAME": "ib0"}
    # The simulator keeps its knobs (tests slow it down through the agent's environment).
    assert engine_environment(AGENT, simulator=True)["BERTH_SIM_REPLY"] == "hi"
    assert "BERTH_TOKEN" not in engine_environment(AGENT, simulator=True)


def test_inherit_takes_names_and_prefixes_without_credentials() -> None:
    assert inherit(AGENT) == {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    assert inherit(AGENT, ("PATH",), prefixes=("HF_",)) == {"PATH": "/usr/bin", "HF_HUB_OFFLINE": "1"}
