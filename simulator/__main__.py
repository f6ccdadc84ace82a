"""Entry point: `python -m simulator serve MODEL [vllm serve flags]`: start-up, signals, simulated failure."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Coroutine, Sequence
from types import FrameType
from typing import Any

from simulator.cli import CommandLineError, EngineConfig, help_text, parse_command_line

_USAGE = "usage: python -m simulator serve MODEL [vllm serve flags...]"
# A SIGTERMed server gives open streams this long before it closes them, as a short drain.
_GRACEFUL_SHUTDOWN_SECONDS = 2
_READY_POLL_SECONDS = 0.01


def _log(level: str, message: str) -> None:
    print(f"{level} {time.strftime('%m-%d %H:%M:%S')} [simulator] {message}", flush=True)


class _StopSignal:
    """SIGTERM/SIGINT as an asyncio event.

    Installed with `signal.signal`, not the loop's handlers, because uvicorn swaps in its own while
    it serves and then restores these and re-raises the signal it caught.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.event = asyncio.Event()
        self._loop = loop
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._loop.call_soon_threadsafe(self.event.set)

    async def wait(self, seconds: float | None) -> bool:
        """Wait for a stop signal for up to `seconds` (None: forever); True if one came."""
        try:
            async with asyncio.timeout(seconds):
                await self.event.wait()
        except TimeoutError:
            return False
        return True


def _fail(config: EngineConfig) -> None:
    """End the process at once, as a crashing rank would: no drain, no goodbye to clients."""
    _log(
        "ERROR",
        f"Simulated engine failure {config.exit_after:g} s after ready (BERTH_SIM_EXIT_AFTER); "
        f"exiting with code {config.exit_code}",
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.exit_code)


async def _run_headless(config: EngineConfig, stop: _StopSignal) -> int:
    if config.data_parallel_address:
        head = f"tcp://{config.data_parallel_address}:{config.data_parallel_rpc_port}"
    else:
        head = f"tcp://{config.master_addr}:{config.master_port}"
    engines = config.data_parallel_size_local or 1
    _log(
        "INFO",
        f"Launching {engines} data parallel engine(s) in headless mode, with head node address {head} "
        f"(node rank {config.node_rank} of {config.nnodes}); no API server on this node",
    )
    if await stop.wait(config.exit_after):
        _log("INFO", "Received a stop signal; shutting down the headless engine")
        return 0
    _fail(config)
    return config.exit_code  # not reached: _fail ends the process


async def _watch_leader(server: Any, config: EngineConfig) -> None:
    """Announce readiness once the port is open, then, if asked, fail on schedule."""
    # uvicorn only offers a flag for "listening"; its lifespan start-up runs before the bind.
    while not server.started:  # noqa: ASYNC110
        await asyncio.sleep(_READY_POLL_SECONDS)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    _log("INFO", f"Starting vLLM API server 0 on http://{host}:{port} (simulated model {config.model})")
    if config.exit_after is not None:
        await asyncio.sleep(config.exit_after)
        _fail(config)


async def _run_leader(config: EngineConfig) -> int:
    import uvicorn

    from simulator.server import create_app

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host=config.host,
            port=config.port,
            lifespan="off",
            ws="none",
            access_log=False,
            log_level="info",
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
        )
    )
    watcher = asyncio.create_task(_watch_leader(server, config))
    try:
        await server.serve()
    finally:
        watcher.cancel()
    _log("INFO", "Server stopped")
    return 0


async def _lifecycle(config: EngineConfig) -> int:
    stop = _StopSignal(asyncio.get_running_loop())
    if config.startup_delay > 0:
        _log("INFO", f"Simulating engine start-up for {config.startup_delay:g} s (BERTH_SIM_STARTUP_DELAY)")
        if await stop.wait(config.startup_delay):
            return 0
    if config.headless:
        return await _run_headless(config, stop)
    return await _run_leader(config)


def _run(coroutine: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]) and return the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or arguments[0] != "serve":
        print(_USAGE, file=sys.stderr)
        return 2
    if "-h" in arguments or "--help" in arguments:
        print(help_text())
        print("Any other --flag is accepted with a warning. Simulator knobs: BERTH_SIM_* variables.")
        return 0
    try:
        config = parse_command_line(arguments[1:], os.environ)
    except CommandLineError as error:
        print(f"{_USAGE}\npython -m simulator serve: error: {error}", file=sys.stderr)
        return 2
    for ignored in config.ignored_args:
        print(
            f"WARNING [simulator] ignoring an argument the simulator does not know: {ignored}",
            file=sys.stderr,
        )
    import prometheus_client

    # Counters' `_created` series double the scrape for nothing a router reads.
    prometheus_client.disable_created_metrics()
    return _run(_lifecycle(config))


if __name__ == "__main__":
    sys.exit(main())
