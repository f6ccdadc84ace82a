"""Fixtures: simulator processes on free loopback ports, started ready and always stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from simulator.testing import LaunchSimulator, SimulatorProcess, start_simulator


@pytest_asyncio.fixture(scope="session")
async def simulator(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimulatorProcess]:
    """One leader shared by the API tests: tool calling on, a small context, a fast token rate."""
    process = await start_simulator(
        "org/sim-model-weights",
        [
            "--served-model-name", "sim-model",
            "--max-model-len", "64",
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        ],
        env={"BERTH_SIM_TOKENS_PER_SECOND": "2000"},
        log_path=tmp_path_factory.mktemp("simulator") / "shared.log",
    )  # fmt: skip
    yield process
    assert await process.stop() == 0, process.log()


@pytest_asyncio.fixture
async def launch_simulator(tmp_path: Path) -> AsyncIterator[LaunchSimulator]:
    """Start simulators for one test: `await launch_simulator(model, [flags], env={...})`; all stop after."""
    started: list[SimulatorProcess] = []

    async def launch(
        model: str = "sim/model",
        arguments: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        wait_ready: bool = True,
    ) -> SimulatorProcess:
        process = await start_simulator(
            model,
            arguments,
            env=env,
            log_path=tmp_path / f"simulator-{len(started)}.log",
            wait_ready=wait_ready,
        )
        started.append(process)
        return process

    yield launch
    for process in started:
        await process.stop()
