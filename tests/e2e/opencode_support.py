"""Running the real OpenCode binary in tests: isolated HOME/XDG dirs, offline switches, `opencode serve`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.opencode import OFFLINE_ENV, ServeCommand, opencode_binary


def require_opencode() -> Path:
    try:
        binary = opencode_binary()
    except Exception:  # noqa: BLE001 — any failure to find it means the same thing here
        pytest.fail("OpenCode is not installed: run `make opencode` (make test does)")
    return binary


def isolated_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: OpenCode reads and writes nothing of the developer's own (~/.config/opencode…)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state"),
           **OFFLINE_ENV}
    env.update(extra or {})
    return env


def run_opencode(project: Path, config: dict[str, Any], args: list[str], env_extra: dict[str, str],
                 timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`opencode ARGS` in `project` with `config` as its opencode.json (the workstation set-up)."""
    project.mkdir(parents=True, exist_ok=True)
    (project / "opencode.json").write_text(json.dumps(config, indent=2))
    env = isolated_env(project.parent / f"{project.name}-home", env_extra)
    return subprocess.run([str(require_opencode()), *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@contextmanager
def serving(command: ServeCommand, log: Path, timeout: float = 60) -> Iterator[str]:
    """Start `opencode serve` as rendered, wait until it answers (401 counts), stop its process group."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **command.env}
    with log.open("w") as output:
        process = subprocess.Popen(list(command.argv), cwd=command.cwd, env=env, stdout=output,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                tail = log.read_text()[-2000:]
                raise AssertionError(f"opencode serve exited {process.returncode}:\n{tail}")
            try:
                httpx.get(command.url + "/session", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    tail = log.read_text()[-2000:]
                    raise AssertionError(f"opencode serve never answered:\n{tail}") from None
                time.sleep(0.3)
        yield command.url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
