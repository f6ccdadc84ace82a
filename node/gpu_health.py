"""A GPU's health as NVML reads it now: temperature (°C), power draw (W) and uncorrected volatile ECC errors.

Each reading is None when it is unknown, and the server keeps the last known value then (server/gpu_health.py):
- a failed read (any NVMLError: not supported, no permission, GPU lost) is unknown;
- 0 °C and 0 W are unknown too: a powered GPU reading them has no working sensor (vGPUs and some boards report 0
  rather than an error), and taking 0 as a reading would make a hot GPU look cool;
- ECC 0 is a real reading ("no uncorrected error since the driver loaded"), but only while ECC mode is enabled:
  NVML's counters need it ("Requires ECC Mode to be enabled", nvmlDeviceGetTotalEccErrors), and a board with ECC
  off counts nothing, so its 0 says nothing. So the count is read only where nvmlDeviceGetEccMode says enabled.
- a reading outside what the contract accepts (berth/contracts/nodes.py GpuReport) is unknown: a glitching sensor
  must not get the node's whole heartbeat refused.
"""

from __future__ import annotations

from typing import Any

MAX_TEMPERATURE_C = 255  # NVML's temperature is an unsigned int; past this it is not a reading
MAX_POWER_W = 10_000.0  # one GPU board; NVML reports milliwatts
MAX_ECC_ERRORS = 2**53 - 1  # a JSON number both sides read exactly (the contract's INT64_MAX)


def read_health(pynvml: Any, handle: Any) -> dict[str, Any]:
    """`temperature_c`, `power_w`, `ecc_uncorrected` for one GPU handle, each None when unknown."""
    return {"temperature_c": temperature_c(pynvml, handle), "power_w": power_w(pynvml, handle),
            "ecc_uncorrected": ecc_uncorrected(pynvml, handle)}


def temperature_c(pynvml: Any, handle: Any) -> int | None:
    try:
        value = int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
    except pynvml.NVMLError:
        return None
    return value if 0 < value <= MAX_TEMPERATURE_C else None


def power_w(pynvml: Any, handle: Any) -> float | None:
    try:
        milliwatts = int(pynvml.nvmlDeviceGetPowerUsage(handle))
    except pynvml.NVMLError:
        return None
    watts = round(milliwatts / 1000.0, 1)
    return watts if 0 < watts <= MAX_POWER_W else None


def ecc_uncorrected(pynvml: Any, handle: Any) -> int | None:
    """Uncorrected ECC errors since the driver loaded (volatile: a GPU reset or reboot clears them, which is when
    such a GPU is fit again); None where ECC mode is off or either read fails."""
    try:
        current, _pending = pynvml.nvmlDeviceGetEccMode(handle)
        if current != pynvml.NVML_FEATURE_ENABLED:
            return None
        count = int(pynvml.nvmlDeviceGetTotalEccErrors(handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                       pynvml.NVML_VOLATILE_ECC))
    except pynvml.NVMLError:
        return None
    return count if 0 <= count <= MAX_ECC_ERRORS else None
