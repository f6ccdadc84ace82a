"""supervise: one process group watched until it exits, stopped on cancellation or shutdown, whether it
is our child or a pid adopted from a previous parent; and the pidfile that makes adoption possible."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from berth.processes import (
    group_alive,
    read_pidfile,
    rewrite_pidfile,
    same_process,
    stop_groups_sync,
    supervise,
    write_pidfile,
)

# A process group of two: a leader that ignores nothing, and a child that outlives a killed leader.
GROUP = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
        "time.sleep(float(sys.argv[1]))"


async def _spawn(seconds: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", GROUP, str(seconds), start_new_session=True)


def _members(pgid: int) -> list[int]:
    """The live pids of the process group `pgid`."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(name)) == pgid:
                    members.append(int(name))
    return members


async def _until(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s"
        await asyncio.sleep(0.02)


class AgentStoppedError(Exception):
    pass


async def _never() -> None:
    await asyncio.Event().wait()


def test_a_child_that_exits_returns_its_status() -> None:
    async def main() -> None:
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", "raise SystemExit(3)",
                                                       start_new_session=True)
        code = await supervise(process, heartbeat=lambda: None, shutdown=_never(),
                               shutdown_error=AgentStoppedError, every_s=0.1)
        assert code == 3

    asyncio.run(main())


def test_heartbeats_while_it_lives_and_stops_the_group_on_cancellation() -> None:
    async def main() -> None:
        process = await _spawn(60)
        beats: list[int] = []
        stops: list[bool] = []
        task = asyncio.create_task(supervise(
            process, heartbeat=lambda: None, shutdown=_never(), shutdown_error=AgentStoppedError,
            on_beat=beats.append, before_stop=lambda: stops.append(True), every_s=0.1, grace_s=2))
        for _ in range(100):  # at least three beats, however slow a loaded machine is
            if len(beats) >= 3:
                break
            await asyncio.sleep(0.1)
        assert group_alive(process.pid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not group_alive(process.pid)  # cancellation returns only once the whole group is gone
        assert beats[:3] == [1, 2, 3] and stops

    asyncio.run(main())


def test_shutdown_stops_the_group_and_raises_the_callers_error() -> None:
    async def main() -> None:
        process = await _spawn(60)
        shutdown, watching = asyncio.Event(), asyncio.Event()

        async def shutdown_requested() -> None:
            watching.set()  # supervise has begun watching for the shutdown
            await shutdown.wait()

        task = asyncio.create_task(supervise(
            process, heartbeat=lambda: None, shutdown=shutdown_requested(),
            shutdown_error=lambda: AgentStoppedError("node agent shut down"), every_s=5, grace_s=2))
        await asyncio.wait_for(watching.wait(), timeout=10)
        await _until(lambda: len(_members(process.pid)) >= 2, 10)  # the leader has started its child
        started = time.monotonic()
        shutdown.set()
        with pytest.raises(AgentStoppedError, match="node agent shut down"):
            await task
        assert time.monotonic() - started < 3  # not a heartbeat interval later
        assert not group_alive(process.pid)

    asyncio.run(main())


def test_an_adopted_pid_is_polled_its_status_is_unknown_and_its_group_is_stopped(tmp_path: Path) -> None:
    leader = subprocess.Popen([sys.executable, "-c", GROUP, "0.5"], start_new_session=True)
    pidfile = tmp_path / "rank.json"
    write_pidfile(pidfile, leader.pid, log="x.log")
    record = read_pidfile(pidfile)
    assert record is not None and record["pid"] == leader.pid and same_process(leader.pid, record["start_ticks"])
    assert not same_process(leader.pid, record["start_ticks"] + 1)  # a reused pid is not the process

    async def main() -> int | None:
        return await supervise(leader.pid, heartbeat=lambda: None, shutdown=_never(),
                               shutdown_error=AgentStoppedError, every_s=0.1, poll_s=0.05, grace_s=2)

    assert asyncio.run(main()) is None
    assert not group_alive(leader.pid)  # the leader's child, left behind, went with the group
    leader.wait()
    assert read_pidfile(tmp_path / "missing.json") is None


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"

    async def main() -> int | None:
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", stubborn, start_new_session=True,
                                                       stdout=asyncio.subprocess.PIPE)
        task = asyncio.create_task(supervise(process, heartbeat=lambda: None, shutdown=_never(),
                                             shutdown_error=AgentStoppedError, every_s=0.1, grace_s=0.5))
        assert process.stdout is not None
        await process.stdout.readline()  # SIGTERM is ignored from here on
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not group_alive(process.pid)
        return await process.wait()

    assert asyncio.run(main()) == -signal.SIGKILL


def test_several_groups_stop_together_in_the_longest_grace_not_the_sum() -> None:
    """`berth down` stops its node agents this way: four sequential 40 s graces were the soak's 20 s down."""
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    groups = [subprocess.Popen([sys.executable, "-c", stubborn], start_new_session=True, stdout=subprocess.PIPE)
              for _ in range(3)]
    for process in groups:
        assert process.stdout is not None
        process.stdout.readline()  # SIGTERM is ignored from here on
    started = time.monotonic()
    stop_groups_sync([process.pid for process in groups], grace_s=2.0)
    took = time.monotonic() - started
    assert not any(group_alive(process.pid) for process in groups)
    assert [process.wait(timeout=5) for process in groups] == [-signal.SIGKILL] * 3
    assert 2.0 <= took < 5.0, took  # one grace for all three (one after another: 6 s at least)


def test_a_pidfile_being_rewritten_is_never_seen_empty_or_half_written(tmp_path: Path) -> None:
    # An agent adopting a process rewrites its pidfile (adopted_by) while others read it (the orphan reaper,
    # the chaos monkey, a test): a truncate-then-write let a reader see "" (a fresh-clone CI failure).
    path = tmp_path / "service.json"
    write_pidfile(path, os.getpid(), name="litellm", padding="x" * 4096)
    seen: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            text = path.read_text()
            if not text or not text.endswith("}"):
                seen.append(text)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for count in range(2000):
            rewrite_pidfile(path, {"pid": os.getpid(), "count": count, "padding": "x" * 4096})
    finally:
        done.set()
        reader.join(timeout=30)
    assert seen == [] and read_pidfile(path) is not None
    assert [p.name for p in tmp_path.iterdir()] == ["service.json"]  # no temporary file left behind
