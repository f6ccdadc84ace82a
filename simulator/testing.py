"""Testing helper: run the simulator as a real process on a free loopback port, wait for it, stop it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from simulator.cli import EngineConfig, parse_command_line

_POLL_SECONDS = 0.02
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class SimulatorDidNotStart(RuntimeError):
    """The process exited or stayed unready past the deadline; the message carries its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the usual small race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_is_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port (loopback answers at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


@dataclass
class SimulatorProcess:
    """One running `python -m simulator serve …`, the configuration it parsed and where to reach it."""

    process: asyncio.subprocess.Process
    config: EngineConfig
    port: int
    log_path: Path
    started_at: float

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        """The OpenAI base URL (…/v1)."""
        return f"{self.base_url}/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, within: float = 10.0) -> float:
        """Wait until GET /health answers 200; return the seconds since the process started."""
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(timeout=1.0) as client:
            while True:
                if self.process.returncode is not None:
                    raise SimulatorDidNotStart(
                        f"simulator exited with {self.process.returncode} before it was ready:\n{self.log()}"
                    )
                try:
                    if (await client.get(f"{self.base_url}/health")).status_code == 200:
                        return time.monotonic() - self.started_at
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SimulatorDidNotStart(f"simulator not ready after {within} s:\n{self.log()}")
                await asyncio.sleep(_POLL_SECONDS)

    async def wait_for_log(self, text: str, within: float = 10.0) -> None:
        """Wait until `text` appears in the process's output."""
        deadline = time.monotonic() + within
        while text not in self.log():
            if self.process.returncode is not None or time.monotonic() > deadline:
                raise SimulatorDidNotStart(f"{text!r} never appeared in the output:\n{self.log()}")
            await asyncio.sleep(_POLL_SECONDS)

    async def wait_exit(self, within: float = 10.0) -> int:
        """Wait for the process to end by itself; return its exit status."""
        try:
            async with asyncio.timeout(within):
                return await self.process.wait()
        except TimeoutError:
            raise TimeoutError(f"simulator still running after {within} s:\n{self.log()}") from None

    async def stop(self, signum: int = signal.SIGTERM, within: float = 10.0) -> int:
        """Send `signum` (SIGTERM by default) and return the exit status; SIGKILL if it outlives `within`."""
        if self.process.returncode is None:
            self.process.send_signal(signum)
        try:
            return await self.wait_exit(within)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise


async def start_simulator(
    model: str = "sim/model",
    arguments: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    log_path: Path | None = None,
    wait_ready: bool = True,
    ready_within: float = 10.0,
) -> SimulatorProcess:
    """Start `python -m simulator serve MODEL --port PORT ARGUMENTS` with BERTH_SIM_* from `env` only."""
    port = free_port() if port is None else port
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix="berth-simulator-", suffix=".log")
        os.close(handle)
        log_path = Path(name)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("BERTH_SIM_")}
    python_path = [str(_PACKAGE_ROOT), environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, python_path))
    environment.update(env or {})
    serve_arguments = [model, "--port", str(port), *arguments]
    # Parsed here too, so a bad command line fails in the test, and the test can read the config.
    config = parse_command_line(serve_arguments, environment)
    log = await asyncio.to_thread(log_path.open, "wb")
    with log:
        started_at = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",  # the working directory off sys.path: the simulator comes from PYTHONPATH only
            "-m",
            "simulator",
            "serve",
            *serve_arguments,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=environment,
        )
    simulator = SimulatorProcess(process, config, port, log_path, started_at)
    if wait_ready:
        try:
            await simulator.wait_ready(ready_within)
        except BaseException:
            await simulator.stop(signal.SIGKILL)
            raise
    return simulator


# What the `launch_simulator` test fixture hands out: `await launch(model, [flags], env={...})`.
LaunchSimulator = Callable[..., Awaitable[SimulatorProcess]]
