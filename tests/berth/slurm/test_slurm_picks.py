"""What a workflow's values may pick for its copies' Slurm jobs (issue 35): a partition or account from the
cluster's selectable lists, a time limit up to its `max_time_limit`, in Slurm's own time forms; each refusal one
line that says what to do. The catalog renders the picks into the definition only when one is set."""

from __future__ import annotations

import pytest

from berth.errors import UserInputError
from berth.settings.slurm import SlurmSettings, time_limit_seconds
from catalog.entry import load_catalog
from catalog.render import render, resolve_values

SETTINGS = SlurmSettings.model_validate({"selectable_partitions": ["gpu", "long"], "selectable_accounts": ["ml"],
                                         "max_time_limit": "2-00:00:00"})


@pytest.mark.parametrize(("text", "seconds"), [("30", 1800), ("30:15", 1815), ("2:00:00", 7200), ("1-0", 86400),
                                                ("1-2:30", 95400), ("2-00:00:01", 172801)])
def test_slurm_time_forms_become_seconds(text: str, seconds: int) -> None:
    assert time_limit_seconds(text) == seconds


def test_a_time_that_is_not_slurms_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a Slurm time"):
        time_limit_seconds("2 days")


def test_picks_within_what_the_cluster_lets_a_workflow_pick_pass() -> None:
    assert SETTINGS.pick_refusal("", "", "") is None
    assert SETTINGS.pick_refusal("long", "ml", "1-12:00:00") is None
    assert SETTINGS.pick_refusal("gpu", "", "2-00:00:00") is None


@pytest.mark.parametrize(("pick", "line"), [
    (("debug", "", ""), "SlurmPartition=debug is not a partition this cluster lets a workflow pick: pick one of "
                        "gpu, long, or leave it empty for the cluster's own."),
    (("", "physics", ""), "SlurmAccount=physics is not an account this cluster lets a workflow pick: pick one of ml, "
                          "or leave it empty for the cluster's own."),
    (("", "", "3-0"), "SlurmTimeLimit=3-0 is longer than this cluster allows (2-00:00:00): ask for less."),
])
def test_picks_beyond_the_settings_are_refused_in_one_line(pick: tuple[str, str, str], line: str) -> None:
    assert SETTINGS.pick_refusal(*pick) == line


def test_a_cluster_without_selectable_lists_lets_no_pick_through() -> None:
    bare = SlurmSettings.model_validate({})
    assert bare.pick_refusal("gpu", "", "") == ("SlurmPartition=gpu: this cluster lets no workflow pick a partition; "
                                                "leave it empty for the cluster's own.")
    assert bare.pick_refusal("", "", "10") == ("SlurmTimeLimit=10: this cluster lets no workflow set its jobs' time "
                                               "limit; leave it empty for the cluster's own.")


def test_the_catalog_renders_picks_only_when_a_value_sets_one() -> None:
    entry = load_catalog()["GPT-OSS 20B"]
    assert render(entry, resolve_values(entry, {})).replica.slurm is None  # type: ignore[union-attr]
    picked = render(entry, resolve_values(entry, {"SlurmPartition": "long", "SlurmTimeLimit": "1-00:00:00"}))
    assert picked.replica is not None and picked.replica.slurm is not None
    assert (picked.replica.slurm.partition, picked.replica.slurm.account, picked.replica.slurm.time_limit) == (
        "long", "", "1-00:00:00")


@pytest.mark.parametrize("values", [{"SlurmPartition": "gpu;rm -rf"}, {"SlurmTimeLimit": "forever"},
                                    {"SlurmAccount": "a b"}])
def test_a_pick_that_is_no_slurm_word_is_refused_by_the_catalog(values: dict[str, str]) -> None:
    entry = load_catalog()["GPT-OSS 20B"]
    with pytest.raises(UserInputError):
        resolve_values(entry, values)
