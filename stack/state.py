"""`berth down` and `berth status`: stack.json, what a running embedded stack publishes about itself
(its supervisor's pid, URLs and children), read and written in one place."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from berth.errors import NotFoundError
from berth.processes import pid_alive, stop_group_sync
from berth.settings import StateLayout


def down(state_dir: Path, timeout_s: float = 120) -> dict[str, Any]:
    layout = StateLayout(state_dir)
    info = read_stack(layout)
    if not info:
        raise NotFoundError(f"No Berth stack is running with state dir {state_dir}.")
    pid = int(info["pid"])
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    # Whatever is still alive (supervisor killed hard): stop it directly, so nothing is orphaned.
    for child in info.get("children", []):
        if pid_alive(int(child["pid"])):
            stop_group_sync(int(child["pid"]), 15)
    if pid_alive(pid):
        stop_group_sync(pid, 5)
    with contextlib.suppress(OSError):
        layout.stack_file.unlink()
    return info


def status(state_dir: Path) -> dict[str, Any]:
    layout = StateLayout(state_dir)
    info = read_stack(layout)
    if not info:
        raise NotFoundError(f"No Berth stack is running with state dir {state_dir}. Start one with `berth up`.")
    info["running"] = pid_alive(int(info["pid"]))
    for child in info.get("children", []):
        child["running"] = pid_alive(int(child["pid"]))
    return info


def read_stack(layout: StateLayout) -> dict[str, Any] | None:
    try:
        data = json.loads(layout.stack_file.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_stack(layout: StateLayout, info: dict[str, Any]) -> None:
    temporary = layout.stack_file.with_suffix(".tmp")
    temporary.write_text(json.dumps(info, indent=2))
    temporary.replace(layout.stack_file)
