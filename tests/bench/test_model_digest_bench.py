"""The digest benchmark on a tiny generated set: it stages, agrees with sha256sum, and reports its figures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.model_digest import measure, stage_files


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils' sha256sum")
def test_the_benchmark_measures_a_tiny_generated_set(tmp_path: Path) -> None:
    assert stage_files(tmp_path, None, size_mib=2) is True
    result = measure(tmp_path, workers=2, rounds=1)
    assert result["files"] == 4 and result["bytes"] > 2 << 20
    assert result["digest_mb_s"] > 0 and result["sha256sum_mb_s"] > 0 and result["ratio"] > 0
    assert len(result["digest"]) == 64
