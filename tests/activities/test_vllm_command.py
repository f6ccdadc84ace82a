"""The `vllm serve` command lines and environment a copy's ranks get (single node, multi-node,
data parallel, expert parallel)."""

from __future__ import annotations

import os

from activities import vllm_command
from activities.vllm_command import rank_environment, vllm_serve_args
from catalog.definition import EngineSpec
from rank import GUARD_DIR, GUARD_MIDDLEWARE
from workflows.payloads import RankSpec


def spec(rank: int, nnodes: int = 2, gpus_per_node: int = 4, **engine: object) -> RankSpec:
    return RankSpec(
        workflow_id="wf",
        copy_id="wf.copy-0",
        rank=rank,
        nnodes=nnodes,
        engine=EngineSpec(
            served_model_name="org/model",
            max_model_len=4096,
            extra_env={"NCCL_SOCKET_IFNAME": "eth0"},
            extra_args=("--enforce-eager",),
            **engine,
        ),  # type: ignore[arg-type]
        gpus_per_node=gpus_per_node,
        gpus=tuple(range(gpus_per_node)),
        host="0.0.0.0",
        port=20001 + rank,
        master_addr="10.0.0.1",
        master_port=20002,
        model_dir="/vol/model",
        log_name=f"vllm-rank-{rank}",
    )


def after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_single_node_copy_is_tensor_parallel_only() -> None:
    args = vllm_serve_args(spec(0, nnodes=1))
    assert args[:2] == ["serve", "/vol/model"]
    assert after(args, "--tensor-parallel-size") == "4"
    assert not {"--nnodes", "--headless", "-dp", "--master-addr"} & set(args)
    assert args[-1] == "--enforce-eager"
    assert after(args, "--middleware") == GUARD_MIDDLEWARE  # every rank's port wants the key on every path


def test_multi_node_copy_spans_nodes_with_the_leaders_address() -> None:
    leader, follower = vllm_serve_args(spec(0)), vllm_serve_args(spec(1))
    for rank, args in enumerate((leader, follower)):
        assert after(args, "--tensor-parallel-size") == "4"  # = GpusPerNode
        assert after(args, "--nnodes") == "2" and after(args, "--node-rank") == str(rank)
        assert after(args, "--master-addr") == "10.0.0.1" and after(args, "--master-port") == "20002"
    assert "--headless" not in leader and "--headless" in follower


def test_data_parallel_copy_flags_exactly() -> None:
    """What the real vLLM-CPU two-node test runs: one engine per node, rank 1 headless."""
    leader = vllm_serve_args(spec(0, gpus_per_node=0, data_parallel=True))
    follower = vllm_serve_args(spec(1, gpus_per_node=0, data_parallel=True))
    common = [
        "-dp",
        "2",
        "--data-parallel-size-local",
        "1",
        "--data-parallel-address",
        "10.0.0.1",
        "--data-parallel-rpc-port",
        "20002",
    ]
    start = leader.index("-dp")
    assert leader[start : start + len(common)] == common
    assert leader[start + len(common) :] == ["--enforce-eager"]
    start = follower.index("-dp")
    assert follower[start:] == [*common, "--headless", "--data-parallel-start-rank", "1", "--enforce-eager"]
    assert not {"--nnodes", "--master-addr", "--tensor-parallel-size"} & set(leader + follower)


def test_expert_parallel_rides_on_data_parallel() -> None:
    args = vllm_serve_args(spec(1, expert_parallel=True))
    assert after(args, "-dp") == "2" and "--enable-expert-parallel" in args
    assert after(args, "--tensor-parallel-size") == "4"
    single = vllm_serve_args(spec(0, nnodes=1, gpus_per_node=1, expert_parallel=True))
    assert "--enable-expert-parallel" not in single  # one GPU: nothing to spread the experts over


def test_extra_env_and_gpus_reach_every_rank() -> None:
    for rank in (0, 1):
        env = rank_environment(spec(rank), "copy-key", "/operator/path")
        assert env == {"NCCL_SOCKET_IFNAME": "eth0", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "VLLM_API_KEY": "copy-key",
                       "PYTHONPATH": f"{GUARD_DIR}{os.pathsep}/operator/path"}


def test_the_engine_keeps_idle_connections_longer_than_litellm_does() -> None:
    """LiteLLM's aiohttp pool keeps an idle connection 15 s (litellm 1.108.7's AIOHTTP_KEEPALIVE_TIMEOUT): vLLM's
    server, 5 s by default, closed ones LiteLLM then sent on. Every vLLM rank gets longer; the simulator nothing."""
    for engine in ("vllm", "vllm-cpu"):
        assert int(vllm_command.engine_defaults(engine)["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > 15
    assert vllm_command.engine_defaults("vllm")["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == "30"
    assert vllm_command.engine_defaults("simulator") == {}
