"""The chaos loop: every 20–40 s (configurable) SIGKILL one Berth process of a running stack, of a kind
drawn from a seeded shuffled deck so every kind comes up and a seed reproduces the sequence. Nothing is
restarted from here: the stack (supervisor, workflows) must bring each one back itself.

With `rounds` (the smoke test's shape) the loop ends after that many decks, each kind killed once per
deck: a kind with nothing running when drawn goes back under its deck and is drawn again last."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One kind per Berth process the soak may kill; the stack supervisor restarts the first five, the
# workflows restart LiteLLM and replace a rank's copy.
KINDS = ("node", "worker", "api", "proxy", "temporal", "litellm", "rank")


@dataclass
class Kill:
    at: float  # seconds since the soak began
    kind: str
    target: str
    pid: int | None  # None: nothing of that kind was running at the time (skipped)

    def row(self) -> dict[str, Any]:
        return {"at_s": round(self.at, 1), "kind": self.kind, "target": self.target, "pid": self.pid}


@dataclass
class ChaosMonkey:
    state_dir: Path
    seed: int
    interval_s: tuple[float, float] = (20.0, 40.0)
    kinds: tuple[str, ...] = KINDS
    # Workflow id → the soak's name for it: targets are named, and drawn, by role rather than by the
    # random workflow ids, so one seed picks the same rank of the same workflow in every run.
    labels: dict[str, str] = field(default_factory=dict)
    # None: kill until the soak ends. N: stop after N decks, every kind killed N times.
    rounds: int | None = None
    kills: list[Kill] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self._deck: list[str] = []

    def _next_kind(self) -> str:
        if not self._deck:
            self._deck = list(self.kinds)
            self.random.shuffle(self._deck)
        return self._deck.pop()

    @property
    def finished(self) -> bool:
        """With `rounds`: every kind killed `rounds` times, i.e. every deck played (never, without). Read
        from the kills done, so it turns true only once the last kill was made and logged."""
        if self.rounds is None:
            return False
        done = Counter(k.kind for k in self.kills if k.pid is not None)
        return all(done[kind] >= self.rounds for kind in self.kinds)

    @property
    def last_kill_at(self) -> float | None:
        """Seconds since the soak began of the latest kill that killed something."""
        return max((k.at for k in self.kills if k.pid is not None), default=None)

    def candidates(self, kind: str) -> list[tuple[str, int]]:
        """(name, pid) of the live processes of one kind, read from what the stack itself records."""
        if kind in ("node", "worker", "api", "proxy", "temporal"):
            try:
                children = json.loads((self.state_dir / "stack.json").read_text())["children"]
            except (OSError, ValueError, KeyError):
                return []
            return [(c["name"], int(c["pid"])) for c in children
                    if c["name"] == kind or (kind == "node" and c["name"].startswith("node-"))]
        pattern = "*/services/*.litellm/service.json" if kind == "litellm" else "*/ranks/*/rank.json"
        found = []
        for record in (self.state_dir / "nodes").glob(pattern):
            try:
                found.append((self._label(record.parent.name), int(json.loads(record.read_text())["pid"])))
            except (OSError, ValueError, KeyError):
                continue
        return sorted(found)

    def _label(self, name: str) -> str:
        workflow_id, _, rest = name.partition(".")
        return f"{self.labels[workflow_id]}.{rest}" if workflow_id in self.labels else name

    def kill_one(self, elapsed: float) -> Kill:
        kind = self._next_kind()
        live = [(name, pid) for name, pid in self.candidates(kind) if alive(pid)]
        if not live:
            kill = Kill(elapsed, kind, "-", None)
        else:
            name, pid = self.random.choice(live)
            try:
                os.kill(pid, signal.SIGKILL)  # a crash: no clean-up of any kind
                kill = Kill(elapsed, kind, name, pid)
            except ProcessLookupError:  # it exited between the look and the kill
                kill = Kill(elapsed, kind, name, None)
        if kill.pid is None and self.rounds is not None:
            self._deck.insert(0, kind)  # its round is not over until it was killed
        self.kills.append(kill)
        print(f"chaos: {kill.row()}", flush=True)
        return kill

    def run(self, stop: threading.Event, began: float) -> None:
        while not self.finished and not stop.wait(self.random.uniform(*self.interval_s)):
            self.kill_one(time.monotonic() - began)

    def summary(self) -> dict[str, Any]:
        done = [k for k in self.kills if k.pid is not None]
        by_kind: dict[str, int] = {}
        for kill in done:
            by_kind[kill.kind] = by_kind.get(kill.kind, 0) + 1
        return {"kills": len(done), "kills_by_kind": by_kind,
                "skipped_nothing_running": [k.kind for k in self.kills if k.pid is None],
                "kill_log": [k.row() for k in self.kills]}


def alive(pid: int) -> bool:
    """Alive and not a zombie (a dead rank its agent has not reaped yet is no target)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
