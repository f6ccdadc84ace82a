"""One chaos soak: a simulated 4-node stack with three workflows (a 2-node copy, a 3-copy pool, a
Proxy=true model behind its LiteLLM proxy), steady load through their endpoints, a process killed every
few seconds, the invariants checked each second, then `berth down` and the orphan count.

The bench's soak lasts `minutes`. The smoke test's (`rounds`) ends once the monkey has killed every kind
`rounds` times, the stack has recovered from the last kill (see `_recovered`) and at least
`min_non_streamed` non-streamed requests were counted — `minutes` is then only its longest."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos.invariants import InvariantMonitor, processes_under
from bench.chaos.load import LoadTally, Target, drive
from bench.chaos.monkey import ChaosMonkey, alive
from catalog.values import parse_values
from stack.driver import RunningStack, free_port_base, wait_for

# Model, catalog values: the three shapes the issue names. Distinct models, so each has its own endpoint.
WORKFLOWS = {
    "two_node_copy": ("nvidia/some-model", "Nodes=2,GpusPerNode=2,Proxy=false"),
    "pool_of_3": ("Qwen/Qwen3-0.6B", "GpusPerNode=1,Proxy=false,MinReplicas=3,MaxReplicas=3,Scope=user"),
    "proxy_true": ("meta-llama/Llama-3.2-1B-Instruct", "GpusPerNode=1,Proxy=true"),
}
START_ORDER = ("proxy_true", "two_node_copy", "pool_of_3")
ORPHAN_WAIT_S = 30.0


@dataclass(frozen=True)
class SoakOptions:
    minutes: float  # the soak's length; with `rounds`, the longest it may last
    seed: int
    interval_s: tuple[float, float] = (20.0, 40.0)
    rate_per_s: float = 3.0
    stream_every: int = 2  # every Nth request of an endpoint's load is streamed (2: alternating)
    nodes: int = 4
    rounds: int | None = None  # stop killing after this many decks (every kind killed once per deck)
    min_non_streamed: int = 0  # with `rounds`: the soak runs on until this many were counted
    # Cluster settings for the stack (BERTH_… variables; berth/settings), beyond the simulator's below.
    stack_env: dict[str, str] = field(default_factory=dict)


class CpuMeter:
    """CPU seconds (user+system, own only) of every process under the state dir, summed over each pid's
    last reading: a killed process keeps what it had used up to the previous sample."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.seen: dict[int, float] = {}
        self.ticks = os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        for row in processes_under(self.state_dir):
            pid = int(row.split(":", 1)[0])
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.seen[pid] = (int(fields[11]) + int(fields[12])) / self.ticks

    def total(self) -> float:
        return sum(self.seen.values())


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat: the other users' load included."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def start_workflows(stack: RunningStack, timings: dict[str, float]) -> tuple[dict[str, str], list[Target]]:
    """Each workflow started once the one before has placed its copy (so one seed sees one placement), the
    Proxy=true one first: its LiteLLM, the slowest to start, comes up while the others start. Then each
    until ready, their endpoints (read once), and a token for each, minted through the API. Through the
    API, as `berth workflow catalog start` sends it (the CLI's own tests cover the CLI): a CLI process per
    call cost 1–2 s each on a busy machine. `timings`: seconds since the first submission."""
    ids: dict[str, str] = {}
    began = time.monotonic()
    for name in START_ORDER:
        model, values = WORKFLOWS[name]
        response = stack.api("POST", "/v1/workflows",
                             json={"entry": "vLLM", "values": parse_values(f"Model=hf://{model},{values}")})
        response.raise_for_status()
        ids[name] = response.json()["id"]
        _placed_or_failed(stack, ids[name], {"starting", "ready"})
        timings[f"{name}_placed"] = round(time.monotonic() - began, 1)
    for name, workflow_id in ids.items():
        _placed_or_failed(stack, workflow_id, {"ready"})
        timings[f"{name}_ready"] = round(time.monotonic() - began, 1)
    ids = {name: ids[name] for name in WORKFLOWS}
    listed = stack.api("GET", "/v1/endpoints")
    listed.raise_for_status()
    endpoints = {row["workflow_id"]: row for row in listed.json()}
    targets = []
    for name, workflow_id in ids.items():
        endpoint = endpoints[workflow_id]
        response = stack.api("POST", f"/v1/endpoints/{endpoint['id']}/tokens", json={"expiration": "8h"})
        response.raise_for_status()
        targets.append(Target(name, endpoint["url"], response.json()["token"], WORKFLOWS[name][0]))
    return ids, targets


def _placed_or_failed(stack: RunningStack, workflow_id: str, phases: set[str]) -> None:
    info = stack.wait_phase(workflow_id, phases | {"failed", "stopped"}, timeout=240)
    if info.get("phase") not in phases:
        raise AssertionError(f"{workflow_id} {info.get('phase')} before the soak: {info.get('last_error')}")


def restarts(stack: RunningStack) -> dict[str, int]:
    status = stack.cli_json("status", "--state-dir", str(stack.state_dir))
    return {c["name"]: int(c["restarts"]) for c in status["children"]}


def run_soak(options: SoakOptions, state_dir: Path) -> dict[str, Any]:
    """The soak, start to orphan count; returns the figures (the caller prints them)."""
    print(f"chaos soak: seed={options.seed} minutes={options.minutes} interval_s={options.interval_s} "
          f"rate_per_s={options.rate_per_s} stream_every={options.stream_every} rounds={options.rounds}", flush=True)
    stack = RunningStack(state_dir=state_dir, port_base=free_port_base(), nodes=options.nodes,
                         simulate_gpus="4x80GB",
                         extra_env={"BERTH_SIM_STARTUP_DELAY": "0", "BERTH_SIM_TOKENS_PER_SECOND": "60",
                                    **options.stack_env})
    started = time.monotonic()
    stack.start()
    up_s = round(time.monotonic() - started, 1)
    result: dict[str, Any] = {"stack_up_s": up_s, "seed": options.seed, "minutes": options.minutes,
                              "kill_interval_s": list(options.interval_s), "rate_per_s": options.rate_per_s,
                              "stream_every": options.stream_every,
                              "nodes": options.nodes, "workflows": {k: v[1] for k, v in WORKFLOWS.items()}}
    if options.rounds is not None:
        result.update({"rounds": options.rounds, "min_non_streamed": options.min_non_streamed})
    if options.stack_env:
        result["stack_env"] = dict(options.stack_env)
    try:
        ids, targets = start_workflows(stack, result.setdefault("workflow_ready_s", {}))
        result["stack_start_s"] = round(time.monotonic() - started, 1)
        result.update(_chaos(stack, options, ids, targets))
    finally:
        stopping = time.monotonic()
        stack.stop()
        result["down_s"] = round(time.monotonic() - stopping, 1)
    orphans: list[str] = []
    try:
        wait_for(lambda: not processes_under(state_dir), ORPHAN_WAIT_S, "every process of the stack to exit", every=1)
    except AssertionError:
        orphans = processes_under(state_dir)
        _clean_up(orphans)
    result.update({"orphans_after_down": len(orphans), "orphan_processes": orphans})
    return result


def _chaos(stack: RunningStack, options: SoakOptions, ids: dict[str, str], targets: list[Target]) -> dict[str, Any]:
    monitor = InvariantMonitor(stack.state_dir, stack.info["api_url"], stack.token, list(ids.values()))
    monkey = ChaosMonkey(stack.state_dir, options.seed, options.interval_s,
                         labels={workflow_id: name for name, workflow_id in ids.items()}, rounds=options.rounds)
    tally, stop, cpu = LoadTally(), threading.Event(), CpuMeter(stack.state_dir)
    busy_before = machine_busy()
    began = time.monotonic()
    threads = drive(targets, options.rate_per_s, stop, tally, options.stream_every)
    chaos = threading.Thread(target=monkey.run, args=(stop, began), name="chaos", daemon=True)
    chaos.start()
    recovered_s: float | None = None
    try:
        while time.monotonic() - began < options.minutes * 60:
            monitor.check()
            cpu.sample()
            if monkey.finished and monkey.last_kill_at is not None:
                if recovered_s is None and _recovered(stack, monitor, tally, targets, began + monkey.last_kill_at,
                                                      options.nodes):
                    recovered_s = time.monotonic() - began - monkey.last_kill_at
                if recovered_s is not None and tally.non_streamed_total() >= options.min_non_streamed:
                    break
            time.sleep(1.0)  # the invariant poll period
    finally:
        stop.set()
        for thread in [*threads, chaos]:
            thread.join(timeout=60)
    soak_s = time.monotonic() - began
    busy_after = machine_busy()
    monitor.finish()
    monitor.check()  # the last word on phases
    monitor.close()
    _name_kills(tally.broken_samples, monkey, began)
    _name_kills(tally.failed_samples, monkey, began)
    machine = (busy_after[0] - busy_before[0]) / max(1, busy_after[1] - busy_before[1])
    ending = {} if options.rounds is None else {
        "recovered_after_last_kill_s": None if recovered_s is None else round(recovered_s, 1)}
    return {
        "workflow_ids": ids, "load_threads": len(threads), **monitor.summary(), **ending,
        **_requests_in_the_killed_proxy(_streams_cut_by_the_proxys_death(tally.summary())),
        **monkey.summary(),
        "component_restarts": restarts(stack),
        "soak_s": round(soak_s, 1),
        "stack_cpu_cores": round(cpu.total() / soak_s, 2),
        "machine_cpu_busy_fraction": round(machine, 3),
        "machine_cores": os.cpu_count(),
    }


def _recovered(stack: RunningStack, monitor: InvariantMonitor, tally: LoadTally, targets: list[Target],
               last_kill: float, nodes: int) -> bool:
    """The stack is whole again after the last kill: every component in stack.json running, every node
    agent ready, every workflow ready with all its copies ready (the monitor's latest reads), and every
    endpoint has answered a non-streamed and a streamed request begun after that kill."""
    try:
        children = json.loads((stack.state_dir / "stack.json").read_text())["children"]
    except (OSError, ValueError, KeyError):
        return False
    if not children or not all(alive(int(c["pid"])) for c in children):
        return False
    if sum(1 for node in monitor.nodes if node.get("state") == "ready") < nodes:
        return False
    for info in monitor.described.values():
        ready = [c for c in info.get("copies") or [] if c.get("status") == "ready"]
        if info.get("phase") != "ready" or len(ready) < (info.get("desired_copies") or 1):
            return False
    return len(monitor.described) == len(targets) and tally.served_after(targets, last_kill)


def _name_kills(samples: list[dict[str, Any]], monkey: ChaosMonkey, began: float) -> None:
    """Each broken stream or failed request with its times since the soak began and the kills while it
    ran (±1 s): which kill cost it."""
    for sample in samples:
        start, end = sample.pop("began_mono") - began, sample.pop("ended_mono") - began
        sample.update({"began_s": round(start, 1), "ended_s": round(end, 1),
                       "kills_meanwhile": [k.row() for k in monkey.kills if start - 1 <= k.at <= end + 1]})


def _streams_cut_by_the_proxys_death(load: dict[str, Any]) -> dict[str, Any]:
    """A stream whose connection was aborted while the endpoint proxy itself was killed is counted on its
    own: the relay that died cannot send an error event, and the client was told (the connection broke
    mid-body, never a clean end). Every other stream without [DONE] or an error event stays broken."""
    cut = [s for s in load["broken_stream_samples"] if s["ending"].startswith("aborted")
           and any(k["kind"] == "proxy" for k in s["kills_meanwhile"])]
    if not cut:
        return {**load, "streams_aborted_as_the_proxy_died": 0}
    streams = dict(load["streams"])
    streams["broken"] -= len(cut)
    streams["aborted_as_the_proxy_died"] = len(cut)
    return {**load, "streams": {k: v for k, v in streams.items() if v},
            "streams_broken_without_error_event": load["streams_broken_without_error_event"] - len(cut),
            "streams_aborted_as_the_proxy_died": len(cut),
            "broken_stream_samples": [s for s in load["broken_stream_samples"] if s not in cut],
            "stream_samples_aborted_as_the_proxy_died": cut}


def _requests_in_the_killed_proxy(load: dict[str, Any]) -> dict[str, Any]:
    """Non-streamed requests whose connection broke as the endpoint proxy itself was SIGKILLed: held by the
    process that died, so nothing but a client's retry recovers them. Counted, and the success rate
    besides them given next to the raw one (the goal is judged on the raw rate)."""
    lost = [s for s in load.get("non_streamed_failure_samples", []) if s["outcome"].startswith("transport_")
            and any(k["kind"] == "proxy" for k in s["kills_meanwhile"])]
    total = load.get("non_streamed_total") or 0
    besides = total - len(lost)
    return {**load, "non_streamed_lost_in_the_killed_proxy": len(lost),
            "non_streamed_success_rate_besides_the_killed_proxy":
                round(load["non_streamed_ok"] / besides, 5) if besides else None}


def _clean_up(orphans: list[str]) -> None:
    """The soak started them: end each orphan by its pid so the next run starts clean."""
    import signal

    for row in orphans:
        pid = int(row.split(":", 1)[0])
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def verdicts(result: dict[str, Any], success_goal: float,
             rate_of: str = "non_streamed_success_rate") -> dict[str, bool]:
    """Each invariant against its goal (the bench's 99.9 % on the raw rate; the smoke test's looser bound on the
    rate besides the requests lost in the killed endpoint proxy, `rate_of`)."""
    rate = result.get(rate_of)
    return {
        "copies_lost_without_event": result["copies_lost_without_event"] == 0,
        "gpus_reserved_twice": result["gpus_reserved_twice"] == 0,
        "orphans_after_down": result["orphans_after_down"] == 0,
        "workflows_failed": result["workflows_failed"] == 0,
        "non_streamed_success_rate": rate is not None and rate >= success_goal,
        "streams_broken_without_error_event": result["streams_broken_without_error_event"] == 0,
    }
