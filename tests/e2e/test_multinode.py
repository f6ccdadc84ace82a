"""Multi-node copies on three simulated 4-GPU node agents: placement on distinct nodes, per-rank
flags, logs and environment, and a copy failing as a unit when one rank dies — at the pool minimum
(workflow failed), above it (dropped) and with ReplaceFailedCopies (placed again)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from berth.processes import pid_alive
from tests.support import (
    RunningStack,
    free_port_base,
    gpus_held,
    process_environment,
    rank_record,
    wait_for,
)

# The general entry stands in for "Nemotron 3 Super" until the catalog branch lands (same values).
MODEL = "Model=hf://nvidia/some-model,Nodes=2,GpusPerNode=4"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("multinode")) / "state"
    running = RunningStack(
        state_dir=state, port_base=free_port_base(), nodes=3, simulate_gpus="4x80GB"
    ).start()
    try:
        yield running
    finally:
        running.stop()


def _chat(stack: RunningStack, workflow_id: str) -> httpx.Response:
    endpoint = stack.endpoint(workflow_id)
    return httpx.post(
        endpoint["url"] + "/v1/chat/completions",
        timeout=30,
        headers={"Authorization": f"Bearer {stack.token_for(endpoint['id'])}"},
        json={
            "model": "nvidia/some-model",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
        },
    )


def _serving_copy(stack: RunningStack, workflow_id: str) -> dict[str, object]:
    replicas = stack.describe(workflow_id)["copies"]
    ready = [r for r in replicas if r["status"] == "ready"]
    assert len(ready) == 1, replicas
    return ready[0]  # type: ignore[no-any-return]


@pytest.mark.litellm
def test_two_node_copy_fails_as_a_unit_at_the_minimum(stack: RunningStack) -> None:
    # ReplaceFailedCopies=0: this test is about the failure itself (the default would place the copy again).
    workflow_id = stack.start_entry("vLLM", MODEL + ",ExtraEnv=NCCL_SOCKET_IFNAME=lo,ReplaceFailedCopies=0,Proxy=false")
    copy = _serving_copy(stack, workflow_id)
    copy_id = str(copy["copy_id"])
    leader, follower = rank_record(stack.state_dir, copy_id, 0), rank_record(stack.state_dir, copy_id, 1)
    assert list(copy["nodes"]) == [leader["node_id"], follower["node_id"]]  # type: ignore[call-overload]
    assert leader["node_id"] != follower["node_id"]
    assert gpus_held(stack, workflow_id) == 8
    assert _chat(stack, workflow_id).status_code == 200
    # Flags, logs and environment per rank.
    log = stack.cli("workflow", "log", workflow_id, "vllm-rank-1").stdout
    assert "--headless" in log and "--nnodes 2 --node-rank 1 --master-addr 127.0.0.1" in log
    assert "--tensor-parallel-size 4" in log
    assert "--headless" not in stack.cli("workflow", "log", workflow_id, "vllm-rank-0").stdout
    for record in (leader, follower):
        env = process_environment(int(record["pid"]))
        assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"

    os.kill(int(follower["pid"]), signal.SIGKILL)
    info = wait_for(
        lambda: (d := stack.describe(workflow_id))["status"] == "failed" and d, 60, "the workflow to fail"
    )
    expected = f"rank 1 on node {follower['node_id']} was killed by signal 9 (SIGKILL)"
    assert expected in info["last_error"] and "pool minimum" in info["last_error"]
    assert info["phase"] == "failed"
    kinds = [e["kind"] for e in info["events"]]
    assert {"copy_stopping", "copy_failed", "failed"} <= set(kinds)
    assert not pid_alive(int(leader["pid"]))
    assert gpus_held(stack, workflow_id) == 0
    assert "failed" in stack.cli("workflow", "describe", workflow_id).stdout


@pytest.mark.litellm
def test_above_the_minimum_the_copy_is_dropped(stack: RunningStack) -> None:
    # ReplaceFailedCopies=0: the drop is under test (the default would place the copy again first).
    workflow_id = stack.start_entry("vLLM", MODEL + ",MinReplicas=0,ReplaceFailedCopies=0,Proxy=false")
    copy_id = str(_serving_copy(stack, workflow_id)["copy_id"])
    follower = rank_record(stack.state_dir, copy_id, 1)
    os.kill(int(follower["pid"]), signal.SIGTERM)
    info = stack.wait_phase(workflow_id, {"scaled_to_zero"}, timeout=60)
    assert info["status"] == "running"
    dropped = [e for e in info["events"] if e["kind"] == "copy_dropped"]
    assert dropped and "MinReplicas=0" in dropped[0]["message"]
    failed = next(e for e in info["events"] if e["kind"] == "copy_failed")
    assert f"rank 1 on node {follower['node_id']} exited with status 0" in failed["message"]
    assert gpus_held(stack, workflow_id) == 0
    stack.cli("workflow", "stop", workflow_id)


@pytest.mark.litellm
def test_replace_failed_copies_places_the_copy_again(stack: RunningStack) -> None:
    workflow_id = stack.start_entry("vLLM", MODEL + ",ReplaceFailedCopies=1,Proxy=false")
    first = str(_serving_copy(stack, workflow_id)["copy_id"])
    os.kill(int(rank_record(stack.state_dir, first, 1)["pid"]), signal.SIGKILL)

    def replaced() -> bool:
        info = stack.describe(workflow_id)
        return any(r["status"] == "ready" and r["copy_id"] != first for r in info["copies"])

    wait_for(replaced, 60, "the replacement copy to serve")
    info = stack.describe(workflow_id)
    assert info["phase"] == "ready" and info["status"] == "running"
    assert "copy_replaced" in [e["kind"] for e in info["events"]]
    assert _chat(stack, workflow_id).status_code == 200
    assert gpus_held(stack, workflow_id) == 8
    stack.cli("workflow", "stop", workflow_id)
    assert gpus_held(stack, workflow_id) == 0


def test_more_nodes_than_the_cluster_has_is_rejected(stack: RunningStack) -> None:
    result = stack.cli(
        "workflow",
        "catalog",
        "start",
        "vLLM",
        "--values",
        "Model=hf://nvidia/some-model,Nodes=4,GpusPerNode=4",
        check=False,
    )
    assert result.returncode != 0
    assert "Rejected" in result.stderr and "only 3 such node(s) of 3" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.litellm
def test_three_copies_on_two_free_nodes_one_waits_then_serves(stack: RunningStack) -> None:
    occupant = stack.start_entry("vLLM", "Model=hf://org/occupant,GpusPerNode=4,Proxy=false")
    pool = stack.start_entry("vLLM",
                             "Model=hf://nvidia/some-model,GpusPerNode=4,MinReplicas=3,MaxReplicas=3,Proxy=false")

    def one_blocked() -> dict[str, object] | None:
        info = stack.describe(pool)
        statuses = sorted(r["status"] for r in info["copies"])
        blocked = any(e["kind"] == "scheduling_blocked" for e in info["events"])
        return info if statuses == ["ready", "ready", "scheduling"] and blocked else None

    info = wait_for(one_blocked, 60, "two copies serving and one blocked")
    pending = next(r for r in info["copies"] if r["status"] == "scheduling")
    assert pending["detail"].startswith("pending: waiting for 1 node(s) with 4 free GPU(s)")
    assert "pending: waiting" in stack.cli("workflow", "describe", pool).stdout
    started = time.monotonic()
    stack.cli("workflow", "stop", occupant)
    wait_for(
        lambda: [r["status"] for r in stack.describe(pool)["copies"]].count("ready") == 3,
        60,
        "the third copy to serve once a node freed",
    )
    assert time.monotonic() - started < 30
    assert gpus_held(stack, pool) == 12
    stack.cli("workflow", "stop", pool)
