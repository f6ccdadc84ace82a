"""Berth's overhead placing a copy as a Slurm job (issue 35): a workflow started (`POST /v1/workflows`, "GPT-OSS 20B",
the engine simulator as the rank command) until it serves, on a one-machine Slurm cluster (stack/slurm_cluster.py)
and a stack whose placement backend is Slurm, minus Slurm's own scheduling latency (the job's SubmitTime →
StartTime, as `scontrol show job` records them, in whole seconds). Target: Berth's overhead ≤ 1 s p50.

Also split: `to_job_s`, from the request to the job's submission as Slurm recorded it (API, pool, reservation,
sbatch); `engine_s`, from rank 0's start (the launcher's clock) to serving as the API reports it (the simulator's
start, Berth's readiness check and publish). Prints JSON.

    PYTHONPATH=. .venv/bin/python -m bench.slurm_start [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import emit, summary
from stack.driver import RunningStack, free_port_base
from stack.slurm_cluster import SlurmCluster

POLL_S = 0.02


def _slurm_times(cluster: SlurmCluster, name: str) -> tuple[float, float]:
    """The job's SubmitTime and StartTime (local time, whole seconds), as Unix times."""
    shown = cluster.command("scontrol", "show", "job", "--oneliner")
    line = next(line for line in shown.splitlines() if f"JobName={name} " in line)
    times = dict(re.findall(r"(SubmitTime|StartTime)=(\S+)", line))
    return tuple(datetime.fromisoformat(times[key]).timestamp() for key in ("SubmitTime", "StartTime"))  # type: ignore[return-value]


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
    submit, start = _slurm_times(cluster, f"berth-{workflow_id}.copy-0")
    rank0 = json.loads((cluster.root / "shared" / "jobs" / f"{workflow_id}.copy-0" / "rank-0.json").read_text())
    stack.cli("workflow", "stop", workflow_id)
    total, slurm = ready - started, start - submit
    return {"total_s": total, "slurm_latency_s": slurm, "berth_overhead_s": total - slurm,
            "to_job_s": submit - started, "engine_s": ready - rank0["started_at"]}


def run(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="berth-slurm-bench-") as tmp:
        cluster = SlurmCluster(Path(tmp) / "slurm").start()
        try:
            settings = {"BERTH_PLACEMENT_BACKEND": "slurm", "BERTH_SLURM_CONF": str(cluster.conf),
                        "BERTH_SLURM_PARTITION": "gpu", "BERTH_SLURM_SHARED_DIR": str(cluster.root / "shared"),
                        "BERTH_SLURM_ENGINE": "simulator"}
            stack = RunningStack(state_dir=Path(tmp) / "state", port_base=free_port_base(), nodes=1,
                                 simulate_gpus="1x80GB", extra_env=settings).start()
            try:
                one_start(stack, cluster)  # warm: the first start also imports and connects everything once
                samples = [one_start(stack, cluster) for _ in range(runs)]
            finally:
                stack.stop()
        finally:
            cluster.stop()
    figures = {key: summary([s[key] for s in samples]) for key in samples[0]}
    return {"runs": runs, "target_berth_overhead_p50_s": 1.0, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    emit("slurm_start", run(parser.parse_args().runs))


if __name__ == "__main__":
    main()
