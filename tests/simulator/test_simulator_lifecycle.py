"""The process behaves like `vllm serve`: fast start, delayed start, failure, headless ranks, signals."""

from __future__ import annotations

import asyncio
import signal
import sys

from simulator.testing import LaunchSimulator, free_port, port_is_open


async def test_starts_fast_and_stops_cleanly_on_sigterm_and_sigint(launch_simulator: LaunchSimulator) -> None:
    first = await launch_simulator()
    ready_after = await first.wait_ready()
    # The brief asks for ~1 s; leave room for a busy shared machine.
    assert ready_after < 2.5, f"ready after {ready_after:.2f} s"
    assert "Starting vLLM API server 0 on http://127.0.0.1" in first.log()
    assert await first.stop(signal.SIGTERM) == 0
    assert not port_is_open(first.port)

    second = await launch_simulator()
    assert await second.stop(signal.SIGINT) == 0


async def test_startup_delay_keeps_the_port_closed(launch_simulator: LaunchSimulator) -> None:
    simulator = await launch_simulator(env={"BERTH_SIM_STARTUP_DELAY": "1.0"}, wait_ready=False)
    await simulator.wait_for_log("Simulating engine start-up")
    assert not port_is_open(simulator.port)
    await asyncio.sleep(0.4)
    assert not port_is_open(simulator.port)
    assert await simulator.wait_ready() >= 1.0


async def test_exit_after_ends_with_the_configured_code(launch_simulator: LaunchSimulator) -> None:
    simulator = await launch_simulator(env={"BERTH_SIM_EXIT_AFTER": "0.3", "BERTH_SIM_EXIT_CODE": "3"})
    assert await simulator.wait_exit(within=5) == 3
    assert "Simulated engine failure" in simulator.log()


async def test_headless_rank_opens_no_port_and_exits_zero_on_sigterm(
    launch_simulator: LaunchSimulator,
) -> None:
    leader_port = free_port()
    rank = await launch_simulator(
        "sim/multi-node",
        [
            "--headless", "--nnodes", "2", "--node-rank", "1", "-tp", "4",
            "--master-addr", "127.0.0.1", "--master-port", str(leader_port),
        ],
        wait_ready=False,
    )  # fmt: skip
    await rank.wait_for_log("headless mode")
    await asyncio.sleep(0.2)
    assert rank.process.returncode is None
    assert not port_is_open(rank.port)
    assert await rank.stop() == 0


async def test_headless_rank_failure_has_the_exit_code(launch_simulator: LaunchSimulator) -> None:
    rank = await launch_simulator(
        "sim/multi-node",
        ["--headless", "--nnodes", "2", "--node-rank", "1"],
        env={"BERTH_SIM_EXIT_AFTER": "0.2", "BERTH_SIM_EXIT_CODE": "9"},
        wait_ready=False,
    )
    assert await rank.wait_exit(within=5) == 9


async def test_a_bad_command_line_exits_2_with_a_reason() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulator", "serve", "m", "--enable-auto-tool-choice",
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await process.communicate()
    assert process.returncode == 2
    assert b"--enable-auto-tool-choice requires --tool-call-parser" in stderr
