"""BERTH_DATA_DIR (issue 35): a node's volumes and model cache leave its state dir for another directory (a Slurm
site's shared filesystem), the keys stay; a relative path is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.errors import UserInputError
from berth.settings import StateLayout


def test_volumes_and_models_follow_the_data_dir_and_the_keys_stay(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = StateLayout(tmp_path / "state")
    assert state.models == tmp_path / "state" / "models" and state.volumes == tmp_path / "state" / "volumes"
    monkeypatch.setenv("BERTH_DATA_DIR", str(tmp_path / "shared"))
    assert state.models == tmp_path / "shared" / "models"
    assert state.ephemeral_volume("wf-1") == tmp_path / "shared" / "volumes" / "ephemeral" / "wf-1"
    assert state.keys == tmp_path / "state" / "keys"


def test_a_relative_data_dir_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_DATA_DIR", "shared/data")
    with pytest.raises(UserInputError) as refused:
        StateLayout(tmp_path).models  # noqa: B018 — the property reads the setting
    assert str(refused.value) == "BERTH_DATA_DIR=shared/data is not an absolute path: name the directory from /."
