"""The node agent's NVML readings (node/inventory.py `nvml_gpus`, node/gpu_health.py) through a fake device layer at
NVML's Python API boundary: a fake `pynvml` module in sys.modules, with the functions, constants and NVMLError the
real nvidia-ml-py has, so that Berth's own code runs unchanged. Hot GPUs, ECC errors, ECC mode off, 0 readings and
failed reads; and `python -m node.inventory --probe` printing what it read."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from node.inventory import main, nvml_gpus

pytestmark = pytest.mark.timeout(30)


class NVMLError(Exception):  # noqa: N818 — NVML's own name
    pass


@dataclass
class FakeGpu:
    """One device as the fake NVML answers for it; a reading set to an exception class fails with it."""

    temperature_c: int | type[Exception] = 45
    power_mw: int | type[Exception] = 120_500
    ecc_mode: tuple[int, int] | type[Exception] = (1, 1)
    ecc_uncorrected: int | type[Exception] = 0
    calls: list[tuple[Any, ...]] = field(default_factory=list)


def _answer(value: Any) -> Any:
    if isinstance(value, type) and issubclass(value, Exception):
        raise value("not supported")
    return value


def fake_pynvml(gpus: list[FakeGpu], init_fails: bool = False) -> types.ModuleType:
    """A module with nvidia-ml-py's names (constants' values as in pynvml.py) answering for `gpus`."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    constants = {"NVML_TEMPERATURE_GPU": 0, "NVML_FEATURE_ENABLED": 1, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
                 "NVML_VOLATILE_ECC": 0}
    for name, value in constants.items():
        setattr(nvml, name, value)
    state = {"initialised": False}

    def init() -> None:
        if init_fails:
            raise NVMLError("Driver Not Loaded")
        state["initialised"] = True

    def total_ecc(handle: FakeGpu, error_type: int, counter_type: int) -> int:
        handle.calls.append(("ecc", error_type, counter_type))
        return int(_answer(handle.ecc_uncorrected))

    functions = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: state.update(initialised=False),
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda index: gpus[index],
        "nvmlDeviceGetMemoryInfo": lambda handle: types.SimpleNamespace(total=80e9, free=79e9, used=1e9),
        "nvmlDeviceGetName": lambda handle: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda handle: f"GPU-{gpus.index(handle):04d}",
        "nvmlDeviceGetPciInfo": lambda handle: types.SimpleNamespace(busId=b"00000000:1A:00.0"),
        "nvmlDeviceGetTemperature": lambda handle, sensor: _answer(handle.temperature_c),
        "nvmlDeviceGetPowerUsage": lambda handle: _answer(handle.power_mw),
        "nvmlDeviceGetEccMode": lambda handle: list(_answer(handle.ecc_mode)),
        "nvmlDeviceGetTotalEccErrors": total_ecc,
    }
    for name, function in functions.items():
        setattr(nvml, name, function)
    nvml.state = state  # type: ignore[attr-defined]
    return nvml


def _read(monkeypatch: pytest.MonkeyPatch, *gpus: FakeGpu) -> list[dict[str, Any]]:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(list(gpus)))
    found, reason = nvml_gpus()
    assert reason is None and not sys.modules["pynvml"].state["initialised"]  # type: ignore[attr-defined]
    return found


def _health(gpu: dict[str, Any]) -> tuple[Any, Any, Any]:
    return gpu["temperature_c"], gpu["power_w"], gpu["ecc_uncorrected"]


def test_a_healthy_gpu_reads_its_temperature_power_in_watts_and_no_ecc_error(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    [read] = _read(monkeypatch, gpu)
    assert _health(read) == (45, 120.5, 0)  # NVML's milliwatts in watts; ECC 0 is a reading: ECC mode is on
    assert read["uuid"] == "GPU-0000" and read["pci_bus_id"] == "00000000:1A:00.0" and read["memory_gb"] == 80.0
    assert gpu.calls == [("ecc", 1, 0)]  # uncorrected, volatile: NVML's constants, not Berth's


def test_a_hot_gpu_and_one_with_ecc_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    hot, broken = _read(monkeypatch, FakeGpu(temperature_c=94, power_mw=700_000), FakeGpu(ecc_uncorrected=3))
    assert _health(hot) == (94, 700.0, 0)
    assert _health(broken) == (45, 120.5, 3)


def test_failed_reads_are_unknown_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    [read] = _read(monkeypatch, FakeGpu(temperature_c=NVMLError, power_mw=NVMLError, ecc_uncorrected=NVMLError))
    assert _health(read) == (None, None, None)
    assert read["memory_gb"] == 80.0  # the GPU itself is still reported


def test_zero_degrees_and_zero_watts_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    [read] = _read(monkeypatch, FakeGpu(temperature_c=0, power_mw=0))
    assert _health(read) == (None, None, 0)


def test_with_ecc_mode_off_or_unreadable_the_count_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    off, unreadable = FakeGpu(ecc_mode=(0, 0)), FakeGpu(ecc_mode=NVMLError)
    assert [_health(read)[2] for read in _read(monkeypatch, off, unreadable)] == [None, None]
    assert off.calls == [] and unreadable.calls == []  # a board with ECC off counts nothing: not even asked


def test_readings_out_of_the_contracts_range_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    [read] = _read(monkeypatch, FakeGpu(temperature_c=4000, power_mw=50_000_000, ecc_uncorrected=2**60))
    assert _health(read) == (None, None, None)


def test_no_driver_is_a_cpu_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], init_fails=True))
    assert nvml_gpus() == ([], "NVML unavailable (Driver Not Loaded)")


def test_the_probe_prints_what_a_heartbeat_would_report(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([FakeGpu(temperature_c=91, ecc_uncorrected=1)]))
    main(["--probe"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["gpu_source"] == "nvml" and printed["cpus"] >= 1
    assert _health(printed["gpus"][0]) == (91, 120.5, 1)
