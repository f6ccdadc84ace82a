"""Supervisor: the foreground `berth up` loop that starts a crashed component again with back-off
(berth/restarts.py), or only reports its exit when restarts are off, and keeps stack.json current."""

from __future__ import annotations

import sys
import time
from typing import Any

from berth.processes import spawn
from berth.restarts import Backoff
from berth.settings import StateLayout
from stack.components import Child
from stack.state import write_stack


class Supervisor:
    """Watches the stack's children once it is up; `info` is the stack.json it rewrites on each change."""

    def __init__(self, children: list[Child], layout: StateLayout, info: dict[str, Any], backoff: Backoff) -> None:
        self.children = children
        self.layout = layout
        self.info = info
        self.backoff = backoff

    def run(self, stop_requested: list[bool]) -> None:
        """Until a stop request, start again a component that dies on its own (with back-off), or only
        report it when restarts are off (`restart_components`). A clean stop never restarts anything:
        this loop has ended before `stop` signals the first child."""
        restart = bool(self.info.get("restarts_enabled", True))
        while not stop_requested:
            for child in self.children:
                if not stop_requested:
                    self._watch(child, restart)
            time.sleep(0.2)
        print("berth: stopping the stack (no component is restarted from here on)", file=sys.stderr, flush=True)

    def _watch(self, child: Child, restart: bool) -> None:
        record, now = child.record, time.monotonic()
        if record.due_at is not None:
            if now >= record.due_at:
                try:
                    child.process = spawn(child.argv, child.log, env=child.env, cwd=self.layout.root,
                                          pass_fds=child.pass_fds)
                except OSError as error:  # the supervisor outlives a component it cannot start (yet)
                    print(f"berth: restarting {child.name} failed ({error}); trying again in "
                          f"{record.postpone(now, self.backoff):g} s", file=sys.stderr, flush=True)
                    return
                record.restarted(now)
                self._publish()
            return
        status = child.process.poll()
        if status is None or child.exit_reported:
            return
        if not restart:
            child.exit_reported = True
            print(f"berth: {child.name} exited with status {status}; see {child.log}", file=sys.stderr, flush=True)
            return
        delay = record.exited(status, now, time.time(), self.backoff)
        print(f"berth: {child.name} exited with status {status}; restarting it in {delay:g} s "
              f"(restart {record.restarts + 1}); see {child.log}", file=sys.stderr, flush=True)
        self._publish()

    def _publish(self) -> None:
        """stack.json follows the children: `berth status` shows restarts, `berth down` finds new pids."""
        self.info["children"] = [child.status() for child in self.children]
        write_stack(self.layout, self.info)
