"""Berth's overhead placing a copy as a Slurm job (issue 35): a workflow started (`POST /v1/workflows`, "GPT-OSS 20B",
the engine simulator as the rank command) until it serves, on a one-machine Slurm cluster (stack/slurm_cluster.py)
and a stack whose placement backend is Slurm, minus Slurm's own scheduling latency: the job's submission → its
allocation. Target: Berth's overhead ≤ 1 s p50.

Slurm's latency is read from slurmctld's own log, which stamps the job's submission (`_slurm_rpc_submit_batch_job`)
and its allocation (`sched: Allocate`, or backfill's `Started`) to the millisecond. `sacct`/`scontrol`'s SubmitTime
and StartTime are the same two events in whole seconds: their difference is 0 or 1 s for a ~0.1–0.9 s latency, and a
p50 of such differences says little (`slurm_latency_whole_s` and `berth_overhead_whole_s` keep them, to compare).

Also split: `to_job_s`, from the request to the job's submission (API, pool, reservation, sbatch); `launch_s`, from
the allocation to rank 0's launcher starting (slurmd, the batch script, srun's step); `engine_s`, from rank 0's start
(the launcher's clock) to serving as the API reports it (the simulator's start, Berth's readiness check, publish);
`simulator_alone_s`, the simulator started by hand after each run until /health answers (no Slurm, jail or Berth):
the engine's own part of `engine_s`.

Both checkouts' bytecode is cached first, as an installed Berth has it (the simulator's modules are read-only in
the rank jail, and a checkout run with PYTHONDONTWRITEBYTECODE has none).

`--baseline DIR` starts a second stack from another checkout's code (e.g. an export of main) on the same cluster,
and alternates the two run by run, so both are measured in the same conditions. Prints JSON.

    PYTHONPATH=. .venv/bin/python -m bench.slurm_start [--runs 5] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import emit, summary
from berth.processes import free_port
from stack.driver import REPO, RunningStack, free_port_base
from stack.slurm_cluster import SlurmCluster

POLL_S = 0.02
_STAMP = r"^\[(?P<at>[0-9T:.-]+)\] "


@dataclass
class CheckoutStack(RunningStack):
    """A stack whose every Berth process runs another checkout's code (the same virtualenv)."""

    checkout: Path = REPO

    @property
    def env(self) -> dict[str, str]:
        env = super().env
        rest = [path for path in env["PYTHONPATH"].split(os.pathsep) if path != str(REPO)]
        env["PYTHONPATH"] = os.pathsep.join([str(self.checkout), *rest])
        return env


def _logged_at(log: str, pattern: str) -> float:
    found = re.search(_STAMP + pattern, log, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"slurmctld's log has no line matching {pattern!r}")
    return datetime.fromisoformat(found["at"]).timestamp()


def slurm_times(cluster: SlurmCluster, name: str) -> dict[str, float]:
    """The job's submission and allocation as slurmctld logged them (ms), and as `scontrol` records them (whole s)."""
    shown = cluster.command("scontrol", "show", "job", "--oneliner")
    line = next(line for line in shown.splitlines() if f"JobName={name} " in line)
    fields = dict(re.findall(r"(JobId|SubmitTime|StartTime)=(\S+)", line))
    job = fields["JobId"]
    log = (cluster.root / "log" / "slurmctld.log").read_text()
    return {"submit": _logged_at(log, rf"_slurm_rpc_submit_batch_job: JobId={job} "),
            "start": _logged_at(log, rf"(sched: Allocate|sched/backfill: _start_job: Started) JobId={job} "),
            "submit_whole": datetime.fromisoformat(fields["SubmitTime"]).timestamp(),
            "start_whole": datetime.fromisoformat(fields["StartTime"]).timestamp()}


def one_start(stack: RunningStack, cluster: SlurmCluster) -> dict[str, float]:
    started = time.time()
    answer = stack.api("POST", "/v1/workflows", json={"entry": "GPT-OSS 20B", "values": {"Proxy": "false"}})
    answer.raise_for_status()
    workflow_id = answer.json()["id"]
    while stack.describe(workflow_id).get("phase") != "ready":
        if time.time() - started > 120:
            raise RuntimeError(f"{workflow_id} not ready in 120 s")
        time.sleep(POLL_S)
    ready = time.time()
    slurm = slurm_times(cluster, f"berth-{workflow_id}.copy-0")
    rank0 = json.loads((cluster.root / "shared" / "jobs" / f"{workflow_id}.copy-0" / "rank-0.json").read_text())
    stack.cli("workflow", "stop", workflow_id)
    total, latency = ready - started, slurm["start"] - slurm["submit"]
    whole = slurm["start_whole"] - slurm["submit_whole"]
    return {"total_s": total, "slurm_latency_s": latency, "berth_overhead_s": total - latency,
            "slurm_latency_whole_s": whole, "berth_overhead_whole_s": total - whole,
            "to_job_s": slurm["submit"] - started, "launch_s": rank0["started_at"] - slurm["start"],
            "engine_s": ready - rank0["started_at"]}


def simulator_alone(checkout: Path, model_dir: Path) -> float:
    """The engine's own share: the simulator started by hand (no Slurm, no jail, no Berth) until /health answers."""
    port = free_port()
    started = time.time()
    engine = subprocess.Popen([sys.executable, "-P", "-m", "simulator", "serve", str(model_dir), "--host", "127.0.0.1",
                               "--port", str(port)], env={**os.environ, "PYTHONPATH": str(checkout)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return time.time() - started
            except httpx.HTTPError:
                pass
            if engine.poll() is not None or time.time() - started > 60:
                raise RuntimeError("the simulator did not start")
            time.sleep(0.005)
    finally:
        engine.terminate()
        engine.wait(timeout=30)


def figures(samples: list[dict[str, float]]) -> dict[str, Any]:
    return {key: summary([s[key] for s in samples]) for key in samples[0]}


def compile_bytecode(checkout: Path) -> None:
    """Cache the checkout's bytecode, as an installed Berth has it: the engine (the simulator) runs as the rank
    user in the jail, where the checkout is read-only, and would otherwise compile its modules at every start."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"/\.", str(checkout)], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})


def run(runs: int, baseline: Path | None) -> dict[str, Any]:
    for checkout in (REPO, *((baseline,) if baseline else ())):
        compile_bytecode(checkout)
    with tempfile.TemporaryDirectory(prefix="berth-slurm-bench-") as tmp:
        cluster = SlurmCluster(Path(tmp) / "slurm").start()
        stacks: dict[str, RunningStack] = {}
        try:
            settings = {"BERTH_PLACEMENT_BACKEND": "slurm", "BERTH_SLURM_CONF": str(cluster.conf),
                        "BERTH_SLURM_PARTITION": "gpu", "BERTH_SLURM_SHARED_DIR": str(cluster.root / "shared"),
                        "BERTH_SLURM_ENGINE": "simulator"}
            for label, checkout in (("this", REPO), *((("baseline", baseline),) if baseline else ())):
                stacks[label] = CheckoutStack(state_dir=Path(tmp) / f"state-{label}", port_base=free_port_base(),
                                              nodes=1, simulate_gpus="1x80GB", extra_env=settings, cwd=checkout,
                                              checkout=checkout).start()
            samples: dict[str, list[dict[str, float]]] = {label: [] for label in stacks}
            for stack in stacks.values():
                one_start(stack, cluster)  # warm: the first start also imports and connects everything once
            checkouts = {"this": REPO, "baseline": baseline}
            for _ in range(runs):
                for label in sorted(stacks):  # alternating: the two checkouts share the machine's moments
                    sample = one_start(stacks[label], cluster)
                    sample["simulator_alone_s"] = simulator_alone(checkouts[label] or REPO, Path(tmp))
                    samples[label].append(sample)
        finally:
            for stack in stacks.values():
                stack.stop()
            cluster.stop()
    result: dict[str, Any] = {"runs": runs, "target_berth_overhead_p50_s": 1.0, **figures(samples["this"])}
    if baseline:
        result["baseline"] = {"checkout": str(baseline), **figures(samples["baseline"])}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. main's) measured in the same rounds")
    options = parser.parse_args()
    emit("slurm_start", run(options.runs, options.baseline.resolve() if options.baseline else None))


if __name__ == "__main__":
    main()
