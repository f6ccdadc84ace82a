"""What a copy placed as a Slurm job finds in its job directory (issue 35), written by the control worker before
it submits: `copy.json` (the engine's argv for the leader and for the other ranks, with the words only the
allocation decides left as placeholders for rank/slurm_rank.py, and the engine's environment) and `key` (the copy's
key, 0600). The same `vllm serve` flags as on Berth's own nodes (activities/vllm_command.py), so a multi-node copy
is the same engine either way."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from activities.slurm_jail import RUN_DIR
from activities.vllm_command import rank_environment, vllm_serve_args
from catalog.definition import EngineSpec
from workflows.payloads import RankSpec

HOST, PORT, MASTER_ADDR, MASTER_PORT, RANK = "@host@", "@port@", "@master_addr@", "@master_port@", "@rank@"
# The flags whose value the allocation decides, and the placeholder the launcher fills in for each.
_PLACED = {"--host": HOST, "--port": PORT, "--data-parallel-address": MASTER_ADDR, "--master-addr": MASTER_ADDR,
           "--data-parallel-rpc-port": MASTER_PORT, "--master-port": MASTER_PORT,
           "--data-parallel-start-rank": RANK, "--node-rank": RANK}
_SAMPLE_RANK = {"leader": 0, "follower": 1}


def _spec(copy_id: str, workflow_id: str, engine: EngineSpec, nodes: int, gpus_per_node: int, model_dir: str,
          rank: int) -> RankSpec:
    return RankSpec(workflow_id=workflow_id, copy_id=copy_id, rank=rank, nnodes=nodes, engine=engine,
                    gpus_per_node=gpus_per_node, gpus=(), host=HOST, port=1, master_addr=MASTER_ADDR,
                    master_port=1, model_dir=model_dir, log_name=f"vllm-rank-{rank}")


def with_placeholders(argv: Sequence[str]) -> list[str]:
    """`argv` with the value after each allocation-decided flag replaced by its placeholder."""
    out = list(argv)
    for index, word in enumerate(out[:-1]):
        if word in _PLACED:
            out[index + 1] = _PLACED[word]
    return out


def rank_argvs(engine_command: Sequence[str], copy_id: str, workflow_id: str, engine: EngineSpec, nodes: int,
               gpus_per_node: int, model_dir: str) -> dict[str, list[str]]:
    """The leader's argv and the other ranks' (one template: the launcher fills in each rank's words)."""
    roles = ("leader", "follower") if nodes > 1 else ("leader",)
    return {role: [*engine_command, *with_placeholders(vllm_serve_args(
        _spec(copy_id, workflow_id, engine, nodes, gpus_per_node, model_dir, _SAMPLE_RANK[role])))]
            for role in roles}


def job_description(argvs: Mapping[str, list[str]], copy_id: str, nodes: int, environment: Mapping[str, str],
                    node_address: str, leader_wait_s: float,
                    jail: Mapping[str, object] | None = None) -> dict[str, object]:
    """`copy.json`: everything the launcher needs but the key; with `jail`, rank/jail.py's plan for the ranks
    (activities/slurm_jail.py) and the directory they start in."""
    description: dict[str, object] = {
        "copy_id": copy_id, "nodes": nodes, "argv": dict(argvs), "environment": dict(environment),
        "node_address": node_address, "key_file": "key", "leader_wait_s": leader_wait_s}
    if jail is not None:
        description.update(jail=dict(jail), run_dir=RUN_DIR)
    return description


def engine_environment_for(engine: EngineSpec, inherited: Mapping[str, str]) -> dict[str, str]:
    """The engine's own variables (the user's ExtraEnv, the guard's PYTHONPATH) on top of what Berth lets a rank
    inherit; the key is not among them (`rank_environment` sets it, and it goes to its own file instead)."""
    spec = _spec("-", "-", engine, 1, 0, "-", 0)
    environment = dict(inherited)
    environment.update(rank_environment(spec, "", inherited.get("PYTHONPATH", "")))
    environment.pop("VLLM_API_KEY", None)
    return environment


def write_job_dir(job_dir: Path, description: Mapping[str, object], key: str) -> None:
    """Create the job directory (0700: only the job's user reads it) with `key` (0600) and `copy.json`. Blocking
    file I/O on the shared filesystem: the activity runs it in a thread."""
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    job_dir.chmod(0o700)
    key_path = job_dir / "key"
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as key_file:
        key_file.write(key)
    key_path.chmod(0o600)
    partial = job_dir / "copy.json.partial"
    partial.write_text(json.dumps(description))
    partial.replace(job_dir / "copy.json")
