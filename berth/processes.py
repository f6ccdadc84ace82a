"""Child processes the Berth way: own process group, log to a file, stop with SIGTERM then SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx


def spawn(argv: Sequence[str], log_path: Path, *, cwd: Path,
          env: Mapping[str, str] | None = None, pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session (its own process group) with stdout+stderr appended to a log. The
    working directory is always the caller's choice, never inherited: whoever runs Berth may stand in
    any folder, and what is there must not matter. `pass_fds`: descriptors the child keeps (a listening
    socket its parent owns), at the same numbers."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        return subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True, pass_fds=tuple(pass_fds),
        )


def berth_python(module: str) -> list[str]:
    """`python -P -m MODULE` on this interpreter: how Berth starts a Python process of its own.

    -P (safe path) keeps the working directory off sys.path, so a `cli/`, `server/` or `node/` folder
    where the user stands is never imported in place of the installed Berth. Not -I: that would also
    drop PYTHONPATH, which is how an operator (or the test suite) points Berth at a checkout on purpose."""
    return [sys.executable, "-P", "-m", module]


def script_interpreter(program: str | Path) -> Path | None:
    """The interpreter a script names on its `#!` line when that is one absolute path (a virtualenv's console
    script), else None (a binary, `#!/usr/bin/env python3`, an unreadable file)."""
    try:
        with open(program, "rb") as script:
            first = script.readline(4096)
    except OSError:
        return None
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    return Path(words[0]) if len(words) == 1 and words[0].startswith("/") else None


def without_relative_python_path(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """`env` with PYTHONPATH's empty and relative entries dropped, and the entries dropped. Each names a
    folder relative to the child's working directory (an empty one *is* it, as `PYTHONPATH=$PYTHONPATH:/x`
    yields when nothing was set), which would put back on sys.path what -P took off."""
    cleaned = dict(env)
    entries = cleaned.pop("PYTHONPATH", "").split(os.pathsep)
    dropped = [entry for entry in entries if not os.path.isabs(entry)]
    kept = [entry for entry in entries if os.path.isabs(entry)]
    if kept:
        cleaned["PYTHONPATH"] = os.pathsep.join(kept)
    return cleaned, [entry for entry in dropped if entry or len(entries) > 1]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone once its state says so.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def process_start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, it names one process for good."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(_pgid_of(pid) == pgid and pid_alive(pid) for pid in _all_pids())


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group_sync(pgid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the whole group, wait up to `grace_s`, then SIGKILL whatever is left."""
    stop_groups_sync([pgid], grace_s)


def stop_groups_sync(pgids: Sequence[int], grace_s: float = 10.0) -> None:
    """SIGTERM every group at once, wait up to `grace_s` for all of them, then SIGKILL whatever is left:
    several groups that stop independently (a stack's node agents) take the longest one's time, not the sum."""
    for pgid in pgids:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = list(pgids)
    while alive and time.monotonic() < deadline:
        alive = [pgid for pgid in alive if group_alive(pgid)]
        if alive:
            time.sleep(0.05)
    for pgid in alive:
        signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(group_alive(pgid) for pgid in alive) and time.monotonic() < deadline:
        time.sleep(0.05)


async def stop_group(pgid: int, grace_s: float = 10.0) -> None:
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        await asyncio.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    # Polling, not an event: the processes are not our children to wait on, only a group to probe.
    while group_alive(pgid) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


class OwnedProcess(Protocol):
    """A process its owner can wait on: its child (asyncio's Process), or one a helper of its own forked and
    reports the end of (activities/litellm_standby.py): `returncode` None while it runs, or when unknown."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int | None: ...


async def supervise(process: OwnedProcess | int, *, heartbeat: Callable[[], object],
                    shutdown: Awaitable[object], shutdown_error: Callable[[], BaseException],
                    on_beat: Callable[[int], object] | None = None, before_stop: Callable[[], object] | None = None,
                    every_s: float = 2.0, poll_s: float = 0.25, grace_s: float = 10.0) -> int | None:
    """Watch one process (the leader of its own group) until it exits, calling `heartbeat` every
    `every_s` and `on_beat(n)` after the n-th; stop its group (SIGTERM, then SIGKILL after `grace_s`)
    when cancelled, when `shutdown` completes (then raise `shutdown_error()`), or on any other way out
    while it still runs. `before_stop` runs just before each stop (a last look at what the group holds).

    `process` is one we can wait on, or the pid of one we cannot (adopted from a previous parent: polled every
    `poll_s`). Returns its return code, or None when its status is unknowable (an adopted pid)."""
    pgid = process if isinstance(process, int) else process.pid
    watched = asyncio.ensure_future(shutdown)

    def running() -> bool:
        return group_alive(pgid) if isinstance(process, int) else process.returncode is None

    async def stop() -> None:
        if before_stop is not None:
            before_stop()
        await stop_group(pgid, grace_s)

    beats = 0
    waiter: asyncio.Future[Any] | None = None
    try:
        while True:
            waiter = asyncio.ensure_future(pid_gone(pgid, poll_s) if isinstance(process, int) else process.wait())
            done, _ = await asyncio.wait({waiter, watched}, timeout=every_s, return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                break
            waiter.cancel()
            if watched in done:
                await stop()
                raise shutdown_error()
            heartbeat()
            beats += 1
            if on_beat is not None:
                on_beat(beats)
        return None if isinstance(process, int) else process.returncode
    except asyncio.CancelledError:
        await stop()
        raise
    finally:
        watched.cancel()
        if waiter is not None:
            waiter.cancel()
        if running():
            await stop()


async def pid_gone(pid: int, poll_s: float) -> None:
    # Polling, not an event: a process that is not our child cannot be waited on.
    while pid_alive(pid):  # noqa: ASYNC110
        await asyncio.sleep(poll_s)


def same_process(pid: int, start_ticks: int | None) -> bool:
    """The pid is alive and is still the process a record named (not a reused pid)."""
    if not pid_alive(pid):
        return False
    return start_ticks is None or process_start_ticks(pid) == start_ticks


def write_pidfile(path: Path, pid: int, **details: Any) -> None:
    """Record a live process (pid and start time: together they name it for good) so that a restarted
    parent can find it, adopt it, or stop it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rewrite_pidfile(path, {"pid": pid, "start_ticks": process_start_ticks(pid), "started": time.time(), **details})


def rewrite_pidfile(path: Path, record: Mapping[str, Any]) -> None:
    """Replace a pidfile whole (a temporary file renamed over it): a reader — a restarted agent, the orphan
    reaper, a test — never sees it empty or half-written, as it could between a truncation and a write."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, path)


def read_pidfile(path: Path) -> dict[str, Any] | None:
    """The record `write_pidfile` left, or None when there is none (or it cannot be read)."""
    try:
        record = json.loads(path.read_text())
        record["pid"] = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if isinstance(record, dict) else None


def remove_file(path: Path) -> None:
    """Remove a file that may already be gone (a pidfile, a socket alias)."""
    with contextlib.suppress(OSError):
        path.unlink()


def plain_directory(top: Path, path: Path) -> Path:
    """`path` (under `top`) made a directory with no symlink below `top`: what lies on the way and is a symlink or
    no directory is removed first. For the agent (root) making a directory in a tree a jailed process wrote (a
    jailed OpenCode's home): it must follow no link that process left, to a key or to /etc."""
    current = top
    for part in path.relative_to(top).parts:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            current.unlink()
        current.mkdir(exist_ok=True)
    return path


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http_sync(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None,
                   verify: ssl.SSLContext | bool = True) -> None:
    """Poll `url` until it answers 2xx; fail early if `proc` exits meanwhile."""
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with status {proc.returncode} before {url} answered")
        try:
            response = httpx.get(url, timeout=1.0, verify=verify)
            if response.is_success:
                return
            last_error = f"HTTP {response.status_code}"
        except httpx.HTTPError as error:
            last_error = type(error).__name__
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s ({last_error})")


def wait_port_sync(host: str, port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with status {proc.returncode} before port {port} opened")
        if port_open(host, port):
            return
        time.sleep(0.1)
    raise TimeoutError(f"port {host}:{port} did not open within {timeout_s:.0f} s")


def tail(path: Path, lines: int = 20, max_bytes: int = 64_000) -> str:
    """The last lines of a log file (bounded read: logs can be large)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
