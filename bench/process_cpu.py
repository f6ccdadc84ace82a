"""CPU per proxied request of every Berth process of a running stack (issue 33): proxy, API, worker, node agents,
Temporal and the copy, read from /proc around a fixed number of requests.

Each process's idle rate (heartbeats, polls, timers) is measured over an idle window of the same length first and
taken off, and the load's window ends only once the API has appended every audit record of those requests (two a
request: the chain is part of what a proxied request costs the control plane, even when it is paid later)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import CHAT_BODY, cpu_seconds, wrk_post_script
from stack.driver import RunningStack, free_port_base

AUDIT_SETTLE_S = 30.0  # the audit writer posts every ~second; this is a ceiling, not a wait


def stack_pids(stack: RunningStack) -> dict[str, int]:
    """The stack's processes by name (proxy, api, worker, node-N, temporal, ...) as its supervisor records them."""
    return {str(child["name"]): int(child["pid"]) for child in stack.info["children"] if child.get("pid")}


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = cpu_seconds(pid)
        except OSError:
            out[name] = 0.0
    return out


async def _drive(url: str, headers: dict[str, str], requests: int, concurrency: int) -> float:
    """`requests` non-streamed completions, `concurrency` at a time; the seconds they took."""
    left = requests
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as client:
        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                (await client.post(url, json=CHAT_BODY, headers=headers)).raise_for_status()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.monotonic() - started


def _drive_wrk(url: str, headers: dict[str, str], seconds: float, concurrency: int) -> tuple[int, float] | None:
    """wrk (C, one thread: it leaves the cores to what is measured) for `seconds`: (requests, seconds), or None
    when wrk is not installed (then the httpx client in this process drives, and bounds, the load)."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    script = wrk_post_script(Path(tempfile.mkdtemp(prefix="berth-bench-wrk-")), headers)
    result = subprocess.run([wrk, "-t1", f"-c{concurrency}", f"-d{seconds:.0f}s", "-s", str(script), url],
                            capture_output=True, text=True, check=True)
    match = re.search(r"(\d+) requests in ([\d.]+)(m?s)", result.stdout)
    if "Non-2xx" in result.stdout or match is None:
        raise RuntimeError(f"wrk saw errors:\n{result.stdout}")
    took = float(match.group(2)) / (1000 if match.group(3) == "ms" else 1)
    return int(match.group(1)), took


def _audit_rows(stack: RunningStack, endpoint_id: str) -> int:
    """The newest audit row's seq for the endpoint (0: none yet): the chain's length as the API holds it."""
    rows = stack.api("GET", "/v1/audit", params={"endpoint": endpoint_id, "limit": 1}).json()
    return int(rows[-1]["seq"]) if rows else 0


def cpu_per_request(stack: RunningStack, url: str, headers: dict[str, str], endpoint_id: str,
                    requests: int = 3000, concurrency: int = 32, copy_pid: int | None = None) -> dict[str, Any]:
    """Microseconds of CPU per request of each process, idle rate taken off; and the window's length."""
    pids = stack_pids(stack)
    if copy_pid is not None:
        pids["copy"] = copy_pid
    asyncio.run(_drive(url, headers, 50, 4))  # warm: connections, caches
    settle = time.monotonic() + AUDIT_SETTLE_S
    seq = _audit_rows(stack, endpoint_id)
    while time.monotonic() < settle:  # the warm-up's records appended before the idle window
        time.sleep(1.0)
        if (now := _audit_rows(stack, endpoint_id)) == seq:
            break
        seq = now
    # The idle window: as long as the load's (wrk runs that long; the httpx client, about that long).
    idle_s = max(8.0, requests / 1500)
    before = _cpu(pids)
    time.sleep(idle_s)
    idle_rate = {name: (value - before[name]) / idle_s for name, value in _cpu(pids).items()}
    before, began = _cpu(pids), time.monotonic()
    driven = _drive_wrk(url, headers, idle_s, concurrency)
    if driven is None:
        load_s = asyncio.run(_drive(url, headers, requests, concurrency))
    else:
        requests, load_s = driven
    expected = seq + 2 * requests  # an ATTEMPT and an outcome a request
    while _audit_rows(stack, endpoint_id) < expected and time.monotonic() - began < load_s + AUDIT_SETTLE_S:
        time.sleep(1.0)  # each look is an API request too: few of them (the idle rate covers the wait)
    window = time.monotonic() - began
    after = _cpu(pids)
    per_request = {name: round(max(0.0, after[name] - before[name] - idle_rate[name] * window) / requests * 1e6, 1)
                   for name in pids}
    return {"requests": requests, "concurrency": concurrency, "load_s": round(load_s, 2),
            "load_generator": "httpx" if driven is None else "wrk", "rps": round(requests / load_s),
            "window_s": round(window, 2), "audit_complete": _audit_rows(stack, endpoint_id) >= expected,
            "cpu_us_per_request": per_request,
            "api_and_worker_us_per_request": round(per_request.get("api", 0) + per_request.get("worker", 0), 1)}


def main() -> None:
    """Standalone: the plain stack (an endpoint token, default limits) and the keyed one (a key, every limit,
    counters in memory), one after the other, each alone on the machine. `bench/proxy_overhead.py` reports the
    same figures beside its latency and throughput ones."""
    import tempfile
    from pathlib import Path

    from bench.common import emit
    from bench.proxy_limits import start_limited, write_limits_file
    from bench.sim_targets import STACK_ENV, endpoint_target

    workdir = Path(tempfile.mkdtemp(prefix="berth-bench-process-cpu-"))
    result: dict[str, Any] = {}
    stack = RunningStack(state_dir=workdir / "plain", port_base=free_port_base(), nodes=1,
                         simulate_gpus="1x80GB", extra_env=STACK_ENV).start()
    try:
        _direct, (url, headers, _verify) = endpoint_target(stack)
        result["plain"] = cpu_per_request(stack, url, headers, endpoint_of(url))
    finally:
        stack.stop()
    limited = start_limited(workdir / "limited", STACK_ENV, write_limits_file(workdir / "limits"), None)
    try:
        url, headers, _verify = limited.keyed
        result["keyed_every_limit"] = cpu_per_request(limited.stack, url, headers, endpoint_of(url))
    finally:
        limited.stack.stop()
    emit("process_cpu", result)


def endpoint_of(url: str) -> str:
    """The endpoint id in a proxy URL (…/endpoints/<id>/v1/…)."""
    return url.split("/endpoints/", 1)[1].split("/", 1)[0]


if __name__ == "__main__":
    main()
