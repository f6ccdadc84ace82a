"""GPU health at the server: the last known readings kept across heartbeats that do not know them, and the rule
(the cluster's `max_gpu_temp_c` and `reject_ecc`) that makes placement skip a GPU.

Known and unknown (the node agent's side: node/gpu_health.py): a temperature or power of None or 0 is unknown, an
ECC count of None is unknown (the agent sends one only where ECC mode is enabled, so its 0 is a real "no error").
An unknown reading never clears a known one: one failed NVML read must not make a hot GPU placeable again for a
heartbeat, so the server keeps the last known value — for as long as the same GPU (its UUID, else its index) keeps
reporting nothing. A known reading replaces it, lower ones included: a GPU that cooled down, or whose ECC count a
reset cleared, is placeable again at its next heartbeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from berth.settings import ClusterSettings

# The readings a heartbeat may not know. 0 is "unknown" for all but the ECC count (see above).
HEALTH_READINGS = ("temperature_c", "power_w", "ecc_uncorrected")
ZERO_IS_A_READING = frozenset({"ecc_uncorrected"})
# What changes at every heartbeat of a real GPU and placement does not read (free memory, and the readings: their
# verdict is what placement reads): left out of the comparison that decides whether a heartbeat changed the node
# for placement, so that a moving reading does not make every API process re-read the node each time.
TELEMETRY = frozenset({"memory_free_gb", *HEALTH_READINGS})


def reading(gpu: Mapping[str, Any], name: str) -> float | None:
    """The GPU's `name` reading where it is known, else None."""
    value = gpu.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if name in ZERO_IS_A_READING:
        return float(value) if isinstance(value, int) and value >= 0 else None
    return float(value) if value > 0 else None


Gpus = Sequence[Mapping[str, Any]]


def keep_known(stored: Gpus | None, reported: Gpus) -> list[dict[str, Any]]:
    """The GPUs as reported, each unknown reading replaced by the one stored for the same GPU (None: a new node)."""
    by_uuid = {gpu["uuid"]: gpu for gpu in stored or () if gpu.get("uuid")}
    by_index = {gpu.get("index"): gpu for gpu in stored or ()}
    kept = []
    for gpu in reported:
        uuid = gpu.get("uuid")
        before = by_uuid.get(uuid) if uuid else by_index.get(gpu.get("index"))
        merged = {**gpu}
        for name in HEALTH_READINGS:
            if reading(gpu, name) is None:
                merged.pop(name, None)
                if before is not None and reading(before, name) is not None:
                    merged[name] = before[name]
        kept.append(merged)
    return kept


@dataclass(frozen=True)
class GpuHealthRule:
    """When placement skips a GPU. The defaults skip nothing: a store made without the cluster's settings (tests,
    benchmarks) places as before; the API passes `from_settings`."""

    max_temp_c: int = 0  # 0: no limit
    reject_ecc: bool = False

    @classmethod
    def from_settings(cls, settings: ClusterSettings) -> GpuHealthRule:
        return cls(max_temp_c=settings.max_gpu_temp_c, reject_ecc=settings.reject_ecc)

    def unhealthy(self, gpu: Mapping[str, Any]) -> str | None:
        """Why placement skips this GPU (one short phrase), or None."""
        temperature = reading(gpu, "temperature_c")
        if self.max_temp_c and temperature is not None and temperature > self.max_temp_c:
            return f"{temperature:g} °C, over the cluster's max_gpu_temp_c ({self.max_temp_c} °C)"
        errors = reading(gpu, "ecc_uncorrected")
        if self.reject_ecc and errors:
            return f"{errors:g} uncorrected ECC error(s) since its last reset (reject_ecc)"
        return None

    def placement_facts(self, gpus: Gpus | None) -> list[tuple[dict[str, Any], str | None]]:
        """What placement reads of a node's GPUs (its facts less TELEMETRY, with each GPU's verdict under this rule):
        a heartbeat that leaves this unchanged changed nothing placement reads."""
        return [({k: v for k, v in gpu.items() if k not in TELEMETRY}, self.unhealthy(gpu)) for gpu in gpus or ()]


SKIP_NONE = GpuHealthRule()  # the default of the store's own parameters: skips nothing
