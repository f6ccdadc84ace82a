"""Shared fixtures and the suite's parallel layout.

`make test` runs the suite under pytest-xdist with `--dist loadgroup`: every test belongs to one group, and a
group runs on one worker, so a stack a module or a profile boots is booted once. A test's group is its stack
profile where it declares one (`@pytest.mark.xdist_group("real-engine")`), else its module (module-scoped
stacks). Each worker draws stack ports from its own slice (BERTH_PORT_SLICE) and writes under its own
basetemp, so workers never collide."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import RunningStack, free_port_base


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and count > 1:
        # The stack driver and every process it starts read this: worker K keeps to the K-th port slice.
        os.environ["BERTH_PORT_SLICE"] = f"{int(worker[2:])}/{count}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Before xdist's own hook reads the marks: a test with no declared profile keeps to its module's group.
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))


@pytest.fixture(scope="session")
def sim_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """The shared simulated profile (2 nodes × 4×80 GB): each test on it works as its own users, workflows and
    endpoints. Tests that kill, restart or reconfigure components boot a stack of their own."""
    state = Path(tmp_path_factory.mktemp("sim-stack"))
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="4x80GB")
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()
