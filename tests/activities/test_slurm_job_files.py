"""A Slurm copy's job directory: the same `vllm serve` flags as on Berth's own nodes with the allocation's words
as placeholders, no key in copy.json, and a key file only the job's user may read."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from activities.slurm_job_files import (
    HOST,
    MASTER_ADDR,
    MASTER_PORT,
    PORT,
    RANK,
    engine_environment_for,
    job_description,
    rank_argvs,
    write_job_dir,
)
from catalog.definition import EngineSpec


def _engine(**values: object) -> EngineSpec:
    return EngineSpec(served_model_name="org/model", max_model_len=4096, extra_env={"NCCL_SOCKET_IFNAME": "ib0"},
                      extra_args=("--enforce-eager",), **values)  # type: ignore[arg-type]


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_one_node_copy_has_a_leader_only_and_its_address_is_left_to_the_launcher() -> None:
    argvs = rank_argvs(["vllm"], "wf.copy-0", "wf", _engine(), 1, 4, "/shared/models/m")
    assert list(argvs) == ["leader"]
    leader = argvs["leader"]
    assert leader[:3] == ["vllm", "serve", "/shared/models/m"]
    assert (after(leader, "--host"), after(leader, "--port"), after(leader, "--tensor-parallel-size")) == (
        HOST, PORT, "4")
    assert leader[-1] == "--enforce-eager"


def test_multi_node_ranks_get_the_leaders_address_and_their_rank_from_the_allocation() -> None:
    pipeline = rank_argvs(["vllm"], "wf.copy-0", "wf", _engine(), 2, 4, "/m")
    follower = pipeline["follower"]
    assert (after(follower, "--master-addr"), after(follower, "--master-port"), after(follower, "--node-rank")) == (
        MASTER_ADDR, MASTER_PORT, RANK)
    assert "--headless" in follower and "--headless" not in pipeline["leader"]
    data = rank_argvs(["vllm"], "wf.copy-0", "wf", _engine(data_parallel=True), 2, 4, "/m")["follower"]
    assert (after(data, "--data-parallel-address"), after(data, "--data-parallel-rpc-port"),
            after(data, "--data-parallel-start-rank")) == (MASTER_ADDR, MASTER_PORT, RANK)


def test_the_job_dir_holds_the_key_apart_and_only_for_the_jobs_user(tmp_path: Path) -> None:
    environment = engine_environment_for(_engine(), {"PATH": "/usr/bin"})
    assert environment["NCCL_SOCKET_IFNAME"] == "ib0" and "VLLM_API_KEY" not in environment
    argvs = rank_argvs(["vllm"], "wf.copy-0", "wf", _engine(), 1, 1, "/m")
    job_dir = tmp_path / "jobs" / "wf.copy-0"
    write_job_dir(job_dir, job_description(argvs, "wf.copy-0", 1, environment, "nodeaddr", 600), "sk-secret")
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((job_dir / "key").stat().st_mode) == 0o600
    assert (job_dir / "key").read_text() == "sk-secret"
    description = json.loads((job_dir / "copy.json").read_text())
    assert "sk-secret" not in (job_dir / "copy.json").read_text()
    assert description["key_file"] == "key" and description["argv"]["leader"] == argvs["leader"]
