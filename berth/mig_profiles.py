"""The MIG profiles Berth can slice an H100 80GB into, and the budget a GPU's slices must fit (issue 36).

From NVIDIA's MIG user guide ("Supported MIG Profiles", H100 80GB): a GPU has 7 compute slices and 8 memory slices of
about 10 GB; a profile `Ng.Mgb` takes N compute slices and M/10 memory slices (3g.40gb takes 4 of the 8: a fourth of
the memory is not half of the compute), and at most so many of one profile fit a GPU. So 3g.40gb + 3g.40gb fits
(6 compute, 8 memory) but 3g.40gb + 3g.40gb + 1g.10gb does not (9 memory slices), though 7 compute slices would.
The hardware also fixes where each instance may start; a budget that fits can still find no free start once the GPU
is fragmented: `nvidia-smi mig -cgi` then refuses, and the slice's record stays pending (docs/mig.md).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

COMPUTE_SLICES = 7  # an H100's GPCs that MIG hands out
MEMORY_SLICES = 8  # its 80 GB in eighths
# A GPU is H100-shaped when NVML names it an H100 and it has 80 GB: NVML's total is 81,559 MiB (85.5 decimal GB, the
# node agent's unit), a simulated one says 80. The 94 and 96 GB H100s slice into other profiles: not these.
H100_NAME = re.compile(r"\bH100\b", re.IGNORECASE)
H100_MEMORY_GB = (79.0, 86.0)


class MigProfile(BaseModel):
    """One MIG profile: its name (what `nvidia-smi mig -cgi` takes), the slices it takes and the memory it has."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[1-7]g\.\d{1,3}gb$")
    compute_slices: int = Field(ge=1, le=COMPUTE_SLICES)
    memory_slices: int = Field(ge=1, le=MEMORY_SLICES)
    memory_gb: float = Field(gt=0)
    max_per_gpu: int = Field(ge=1, le=COMPUTE_SLICES)  # NVIDIA's "Number of Instances Available"

    @property
    def short_name(self) -> str:
        return self.name.split(".", 1)[0]


H100_PROFILES: tuple[MigProfile, ...] = (
    MigProfile(name="1g.10gb", compute_slices=1, memory_slices=1, memory_gb=10, max_per_gpu=7),
    MigProfile(name="2g.20gb", compute_slices=2, memory_slices=2, memory_gb=20, max_per_gpu=3),
    MigProfile(name="3g.40gb", compute_slices=3, memory_slices=4, memory_gb=40, max_per_gpu=2),
    MigProfile(name="7g.80gb", compute_slices=7, memory_slices=8, memory_gb=80, max_per_gpu=1),
)

PROFILE_NAMES = tuple(name for p in H100_PROFILES for name in (p.name, p.short_name))


def profile_named(name: str) -> MigProfile:
    """The profile called `name` (`1g.10gb`) or by its short name (`1g`); ValueError, listing the names, otherwise."""
    wanted = name.strip().lower()
    for profile in H100_PROFILES:
        if wanted in (profile.name, profile.short_name):
            return profile
    names = ", ".join(f"{p.name} ({p.short_name})" for p in H100_PROFILES)
    raise ValueError(f"unknown MIG profile '{name[:32]}'; an H100 80GB takes {names}")


def h100_shaped(name: str, memory_gb: float) -> bool:
    low, high = H100_MEMORY_GB
    return bool(H100_NAME.search(name)) and low <= memory_gb <= high


def budget_refusal(existing: list[MigProfile], adding: MigProfile) -> str | None:
    """Why `adding` does not fit beside the GPU's `existing` slices (one line), or None when it does."""
    same = sum(1 for p in existing if p.name == adding.name) + 1
    if same > adding.max_per_gpu:
        return f"an H100 holds at most {adding.max_per_gpu} {adding.name} slice(s), and this would be number {same}"
    compute = sum(p.compute_slices for p in existing) + adding.compute_slices
    if compute > COMPUTE_SLICES:
        return (f"{adding.name} needs {adding.compute_slices} compute slice(s), and only "
                f"{COMPUTE_SLICES - compute + adding.compute_slices} of {COMPUTE_SLICES} are free")
    memory = sum(p.memory_slices for p in existing) + adding.memory_slices
    if memory > MEMORY_SLICES:
        free_gb = (MEMORY_SLICES - memory + adding.memory_slices) * 10
        return f"{adding.name} needs {adding.memory_gb:g} GB, and only {free_gb} GB of the GPU's 80 GB is free"
    return None
