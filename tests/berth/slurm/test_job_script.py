"""A copy's sbatch options and batch script: Berth's shape first, the site's settings, a value's pick in place of
the default, and nothing a user typed in the script."""

from __future__ import annotations

import pytest

from berth.settings import SlurmSettings
from berth.slurm.job_script import CopyJob, batch_script, job_name, sbatch_options


def _job(**values: object) -> CopyJob:
    fields: dict[str, object] = {"copy_id": "wf-1-c2", "nodes": 2, "gpus_per_node": 4, "job_dir": "/shared/jobs/c2",
                                 "launcher": ("/opt/berth/bin/python", "-I", "/opt/berth/rank/slurm_rank.py")}
    fields.update(values)
    return CopyJob(**fields)  # type: ignore[arg-type]


def test_options_ask_one_task_per_node_with_the_copys_gpus_and_the_sites_settings() -> None:
    settings = SlurmSettings(partition="gpu", account="proj1", qos="normal", time_limit="1-00:00:00",
                             sbatch_options=["--exclusive", "--constraint=a100"])
    options = sbatch_options(_job(), settings)
    assert options[:6] == ["--job-name=berth-wf-1-c2", "--nodes=2", "--ntasks-per-node=1", "--chdir=/shared/jobs/c2",
                           "--output=/shared/jobs/c2/slurm-%j.out", "--export=ALL"]
    assert "--gpus-per-node=4" in options
    assert {"--partition=gpu", "--account=proj1", "--time=1-00:00:00", "--qos=normal"} <= set(options)
    assert options[-2:] == ["--exclusive", "--constraint=a100"]


def test_a_values_pick_replaces_the_default_and_no_gpus_asks_for_none() -> None:
    options = sbatch_options(_job(gpus_per_node=0, partition="debug", time_limit="30"), SlurmSettings(partition="gpu"))
    assert "--partition=debug" in options and "--partition=gpu" not in options and "--time=30" in options
    assert not any(o.startswith("--gpus") for o in options)


def test_the_script_sruns_the_launcher_once_per_node_and_kills_the_job_on_a_bad_exit() -> None:
    script = batch_script(_job())
    assert script.startswith("#!/bin/bash\n")
    assert ("exec srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=1 --export=ALL /opt/berth/bin/python -I "
            "/opt/berth/rank/slurm_rank.py /shared/jobs/c2") in script
    assert job_name("wf-1-c2") == "berth-wf-1-c2"


@pytest.mark.parametrize("values", [{"copy_id": "a b"}, {"copy_id": "x;rm -rf"}, {"nodes": 0},
                                    {"partition": "gpu --wrap"}, {"account": "$(id)"}])
def test_a_job_that_cannot_be_named_safely_is_refused(values: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _job(**values)


@pytest.mark.parametrize(("options", "words"), [(["--nodes=9"], "sets what Berth sets"),
                                                (["--comment=a b"], "one `--option`"),
                                                (["--wrap=id"], "sets what Berth sets"),
                                                (["-p gpu"], "one `--option`")])
def test_a_sites_extra_option_may_not_change_the_copy_or_reach_a_shell(options: list[str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        SlurmSettings(sbatch_options=options)
