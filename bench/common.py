"""Shared bench helpers: a stack in a temp dir, percentiles, process CPU time, JSON output."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "mean": statistics.fmean(values) if values else float("nan"), "n": len(values)}


def cpu_seconds(pid: int) -> float:
    """User+system CPU of a process and its reaped children, from /proc (clock ticks → seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def emit(name: str, result: dict[str, Any]) -> None:
    out = {"benchmark": name, **result}
    print(json.dumps(out, indent=2))
    target = REPO / "bench" / "results"
    target.mkdir(exist_ok=True)
    (target / f"{name}.json").write_text(json.dumps(out, indent=2))


# The non-streamed completion the proxy benchmarks send (max_tokens 1: the proxy's cost, not the copy's).
CHAT_BODY = {"model": "openai/gpt-oss-20b", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}


def wrk_post_script(directory: Path, headers: dict[str, str]) -> Path:
    """A wrk Lua script that POSTs CHAT_BODY with `headers` (wrk's own way to send a body)."""
    lines = "".join(f'wrk.headers["{name}"] = "{value}"\n' for name, value in headers.items())
    script = directory / "post.lua"
    script.write_text(f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n{lines}'
                      f"wrk.body = '{json.dumps(CHAT_BODY)}'\n")
    return script
