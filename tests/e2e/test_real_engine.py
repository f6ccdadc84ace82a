"""The real path on a CPU-only machine: catalog start SmolLM2 → weights downloaded by huggingface_hub
from the local olah mirror → vLLM-CPU rank → OpenAI SDK through the Berth endpoint."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from activities.ranks import _shm_names
from tests.e2e.conftest import REAL_ENGINE_GROUP, ServedSmolLM2
from tests.support import (
    SMOLLM2_QUESTION,
    RunningStack,
    processes_mentioning,
    rank_record,
    runs_as_the_rank_user_seeing_no_key,
)

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

pytestmark = [pytest.mark.real_engine, pytest.mark.xdist_group(REAL_ENGINE_GROUP)]


def shm_mapped_by_live_processes() -> set[str]:
    names: set[str] = set()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        names |= _shm_names(pid)
    return names


@pytest.fixture(scope="module")
def cpu_stack(real_stack: RunningStack) -> RunningStack:
    """The real-engine profile's two CPU nodes (tests/e2e/conftest.py), shared with the real-client tests."""
    return real_stack


def test_smollm2_end_to_end(cpu_stack: RunningStack, serve_smollm2: Callable[[], ServedSmolLM2]) -> None:
    """The profile's shared copy (tests/e2e/conftest.py), which the real clients used first: its start as
    `--watch` showed it, the SDK through its endpoint, then its stop and everything the stop must clean up."""
    stack = cpu_stack
    nodes = stack.cli_json("node", "list")
    assert {n["engine"] for n in nodes} == {"vllm-cpu"} and all(n["gpus"] == [] for n in nodes)
    served = serve_smollm2()
    workflow_id, shm_before_start = served.workflow_id, served.shm_before_start
    assert "Ready." in served.watched and "downloaded" in served.watched
    info = stack.describe(workflow_id)
    assert info["weights"]["bytes_total"] > 200_000_000 and not info["weights"]["dry_run"]
    endpoint = stack.endpoint(workflow_id)
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=stack.token_for(endpoint["id"]), max_retries=0)
    assert [m.id for m in client.models.list().data] == [MODEL]
    question = [{"role": "user", "content": SMOLLM2_QUESTION}]
    reply = client.chat.completions.create(model=MODEL, messages=question, max_tokens=32, temperature=0)
    assert "Paris" in (reply.choices[0].message.content or "")
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(model=MODEL, messages=question, max_tokens=32, temperature=0,
                                                    stream=True)
        if chunk.choices
    )
    assert "Paris" in streamed
    completion = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8,
                                           temperature=0)
    assert "Paris" in completion.choices[0].text
    _copy_port_answers_only_berth(stack, info)
    shm_before_stop = set(os.listdir("/dev/shm"))
    stack.cli("workflow", "stop", workflow_id)
    assert not [p for p in processes_mentioning("vllm") if str(stack.state_dir) in p], "a rank is still running"
    assert not (stack.state_dir / "volumes" / "ephemeral" / workflow_id).exists()
    # Other workers' processes (PostgreSQL, Chromium) may make segments meanwhile; those are mapped by a live
    # process, and the rank's processes are gone (checked above).
    leftovers = {n for n in set(os.listdir("/dev/shm")) - shm_before_stop} - shm_mapped_by_live_processes()
    assert not leftovers
    # Whatever the rank created in /dev/shm while it ran is gone too (segments that were there before
    # the start, or that a live process outside the rank still maps, belong to someone else).
    created = {n for n in set(os.listdir("/dev/shm")) - shm_before_start if n.startswith(("psm_", "sem.mp-"))}
    rank_segments = created - shm_mapped_by_live_processes()
    assert not rank_segments, rank_segments


def _copy_port_answers_only_berth(stack: RunningStack, info: dict[str, Any]) -> None:
    """Issue 29, finding 1, on vLLM itself: its own key check leaves /invocations (a full chat completion)
    and /tokenize open; the rank's guard (rank/berth_rank_guard.py) wants the copy's key there too."""
    copy = next(c for c in info["copies"] if c["status"] == "ready")
    chat = {"model": MODEL, "messages": [{"role": "user", "content": SMOLLM2_QUESTION}], "max_tokens": 4}
    for headers in ({}, {"Authorization": "Bearer guessed"}):
        for path, body in (("/invocations", chat), ("/tokenize", {"model": MODEL, "prompt": "Paris"})):
            refused = httpx.post(copy["url"] + path, json=body, headers=headers, timeout=30)
            assert refused.status_code == 401 and "answers only Berth" in refused.text, (path, refused.text)
        assert httpx.get(copy["url"] + "/metrics", headers=headers, timeout=30).status_code == 401
    assert httpx.get(copy["url"] + "/health", timeout=30).status_code == 200  # liveness: the one open path
    key = {"Authorization": f"Bearer {stack.replica_key(copy['copy_id'])}"}
    tokens = httpx.post(copy["url"] + "/tokenize", json={"model": MODEL, "prompt": "Paris"}, headers=key, timeout=30)
    assert tokens.status_code == 200 and tokens.json()["count"] >= 1, tokens.text
    # And vLLM itself runs as the rank user, the keys out of its sight (issue 29, finding 2).
    runs_as_the_rank_user_seeing_no_key(int(rank_record(stack.state_dir, copy["copy_id"], 0)["pid"]), stack.state_dir)


def test_data_parallel_copy_across_two_cpu_nodes_fails_as_a_unit(cpu_stack: RunningStack) -> None:
    """Two vLLM-CPU ranks on two node agents (-dp 2, rank 1 headless). Real vLLM keeps rank 0 healthy
    after rank 1 dies; Berth must notice, stop rank 0 and say which rank, node and signal."""
    stack = cpu_stack
    # ReplaceFailedCopies=0: the failure itself is under test (by default the copy would be placed again).
    workflow_id = stack.start_entry("SmolLM2 135M Instruct",
                                    "Nodes=2,DataParallel=true,ReplaceFailedCopies=0,Proxy=false")
    endpoint = stack.endpoint(workflow_id)
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=stack.token_for(endpoint["id"]), max_retries=0)
    reply = client.chat.completions.create(model=MODEL, max_tokens=16, temperature=0,
                                           messages=[{"role": "user", "content": SMOLLM2_QUESTION}])
    assert "Paris" in (reply.choices[0].message.content or "")
    copy = stack.describe(workflow_id)["copies"][0]
    assert len(copy["nodes"]) == 2 and copy["nodes"][0] != copy["nodes"][1]
    rank1_log = stack.cli("workflow", "log", workflow_id, "vllm-rank-1").stdout
    assert "--headless" in rank1_log and "--data-parallel-start-rank 1" in rank1_log
    records = {}
    for node in copy["nodes"]:
        for path in (stack.state_dir / "nodes" / node / "ranks").glob(f"{copy['copy_id']}-r*/rank.json"):
            records[path.parent.name[-2:]] = json.loads(path.read_text())["pid"]
    assert set(records) == {"r0", "r1"}
    os.killpg(records["r1"], signal.SIGKILL)
    info = stack.wait_phase(workflow_id, {"failed"}, timeout=120)
    assert f"rank 1 on node {copy['nodes'][1]}" in info["last_error"]
    assert "signal 9 (SIGKILL)" in info["last_error"]
    deadline = time.monotonic() + 30
    while Path(f"/proc/{records['r0']}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{records['r0']}").exists(), "rank 0 still runs after rank 1 died"
    nodes = stack.cli_json("node", "list")
    assert all(n["allocated"] == 0 for n in nodes)


def test_smollm2_materialized_once_and_served_through_model_ref(cpu_stack: RunningStack) -> None:
    """Issue 16: SmolLM2 registered, materialized by its model job into the cache (verified against the
    mirror's checksums, digest recorded), then served by the real engine from the digest's directory."""
    stack = cpu_stack
    stack.cli("model", "add", "smol", "--source", f"hf://{MODEL}", "--require-checksum")
    stack.cli("model", "materialize", "smol", "--watch", timeout=600)
    model = stack.cli_json("model", "status", "smol")
    assert model["state"] == "Ready" and model["verified"] is True and model["safetensors_files"] >= 1
    directory = stack.state_dir / "models" / "sha256" / model["digest"]
    assert (directory / "config.json").is_file()
    workflow_id = stack.start_entry("SmolLM2 135M Instruct", "Model=model://smol,Proxy=false")
    info = stack.describe(workflow_id)
    assert info["weights"]["digest"] == model["digest"] and info["weights"]["model_dir"] == str(directory)
    assert info["weights"]["model"] == "model://smol" and info["weights"]["cache_hit"] is True
    endpoint = stack.endpoint(workflow_id)
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=stack.token_for(endpoint["id"]), max_retries=0)
    reply = client.chat.completions.create(model=MODEL, max_tokens=16, temperature=0,
                                           messages=[{"role": "user", "content": SMOLLM2_QUESTION}])
    assert "Paris" in (reply.choices[0].message.content or "")
    stack.cli("workflow", "stop", workflow_id)
    assert directory.is_dir()  # the cache keeps the bytes after the workflow; eviction decides


def test_smollm2_rolls_to_a_bigger_context_without_a_new_endpoint(cpu_stack: RunningStack) -> None:
    """Issue 17: a rolling update on the real engine, MaxContextSize 2048 → 4096: the new copy is started
    from revision 2's definition, the old one drained and stopped, the endpoint and its URL unchanged."""
    stack = cpu_stack
    workflow_id = stack.start_entry("SmolLM2 135M Instruct", "MaxContextSize=2048")
    endpoint = stack.endpoint(workflow_id)
    stack.cli("workflow", "update", workflow_id, "--values", "MaxContextSize=4096", "--min-ready-seconds", "1",
              "--wait", timeout=900)
    info = stack.describe(workflow_id)
    assert info["revision"] == 2 and info["rollout"]["phase"] == "complete"
    assert [c["revision"] for c in info["copies"] if c["status"] == "ready"] == [2]
    copy_id = next(c["copy_id"] for c in info["copies"] if c["status"] == "ready")
    pid = int(rank_record(stack.state_dir, copy_id, 0)["pid"])
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert argv[argv.index(b"--max-model-len") + 1] == b"4096", argv
    assert stack.endpoint(workflow_id)["url"] == endpoint["url"]
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=stack.token_for(endpoint["id"]), max_retries=0)
    reply = client.chat.completions.create(model=MODEL, max_tokens=16, temperature=0,
                                           messages=[{"role": "user", "content": SMOLLM2_QUESTION}])
    assert "Paris" in (reply.choices[0].message.content or "")
    stack.cli("workflow", "stop", workflow_id)
