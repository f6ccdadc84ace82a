"""The H100 80GB MIG profile catalog (berth/mig_profiles.py): names and short names, the compute and memory budget a
GPU's slices must fit (NVIDIA's MIG user guide: 7 compute slices, 8 memory slices of 10 GB), and what is H100-shaped."""

from __future__ import annotations

import pytest

from berth.mig_profiles import H100_PROFILES, budget_refusal, h100_shaped, profile_named

pytestmark = pytest.mark.timeout(10)


def test_profiles_read_by_name_or_short_name_and_an_unknown_one_lists_them() -> None:
    assert [p.name for p in H100_PROFILES] == ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    for name, short in (("1g.10gb", "1g"), ("2g.20gb", "2g"), ("3g.40gb", "3g"), ("7g.80gb", "7g")):
        assert profile_named(name) is profile_named(short) is profile_named(f" {short.upper()} ")
    assert profile_named("3g").memory_slices == 4 and profile_named("3g").memory_gb == 40
    with pytest.raises(ValueError, match=r"unknown MIG profile '4g.40gb'; an H100 80GB takes 1g.10gb \(1g\), "):
        profile_named("4g.40gb")


def _refusal(*existing: str, adding: str) -> str | None:
    return budget_refusal([profile_named(name) for name in existing], profile_named(adding))


def test_the_budget_counts_compute_memory_and_instances_of_a_profile() -> None:
    assert _refusal("3g", adding="3g") is None  # 6 compute, 8 memory slices: fits
    assert _refusal("3g", "3g", adding="1g") == "1g.10gb needs 10 GB, and only 0 GB of the GPU's 80 GB is free"
    assert _refusal("2g", "2g", "2g", adding="1g") is None  # 7 compute, 7 memory
    assert _refusal("2g", "2g", "2g", adding="2g") == (
        "an H100 holds at most 3 2g.20gb slice(s), and this would be number 4")
    assert _refusal(*["1g"] * 6, adding="1g") is None
    assert "at most 7 1g.10gb" in str(_refusal(*["1g"] * 7, adding="1g"))
    assert _refusal("7g", adding="1g") == "1g.10gb needs 1 compute slice(s), and only 0 of 7 are free"
    assert _refusal("1g", adding="7g") == "7g.80gb needs 7 compute slice(s), and only 6 of 7 are free"


def test_only_an_h100_with_80_gb_is_h100_shaped() -> None:
    assert h100_shaped("NVIDIA H100 80GB HBM3", 85.5)  # NVML's total, in the node agent's decimal GB
    assert h100_shaped("NVIDIA H100 PCIe", 80)
    assert not h100_shaped("NVIDIA H100 NVL", 99.9)  # the 94 GB part slices into other profiles
    assert not h100_shaped("NVIDIA A100-SXM4-80GB", 85.1)
    assert not h100_shaped("Simulated GPU 80GB", 80)
