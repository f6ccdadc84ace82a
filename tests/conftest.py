"""Shared fixtures: one simulated-GPU stack per session for the fast end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import RunningStack, free_port_base


@pytest.fixture(scope="session")
def sim_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("sim-stack"))
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="4x80GB")
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()
