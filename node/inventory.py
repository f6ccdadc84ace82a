"""What a node has: GPUs (NVML, or simulated with a spec like `4x80GB`), CPUs and memory."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from berth.errors import UserInputError
from node.gpu_health import read_health

SIMULATED = re.compile(r"^(\d+)x(\d+(?:\.\d+)?)GB$", re.IGNORECASE)


def simulated_gpus(spec: str, node_id: str) -> list[dict[str, Any]]:
    match = SIMULATED.match(spec.strip())
    if not match:
        raise UserInputError(f"--simulate-gpus '{spec}' is not COUNTxSIZEGB, e.g. 4x80GB.")
    count, size = int(match.group(1)), float(match.group(2))
    return [{"index": i, "name": f"Simulated GPU {size:g}GB", "memory_gb": size, "memory_free_gb": size,
             "uuid": f"SIM-{node_id}-{i}", "simulated": True} for i in range(count)]


def nvml_gpus() -> tuple[list[dict[str, Any]], str | None]:
    """Real GPUs via NVML; (`[]`, reason) where there is no driver — a CPU-only node, not an error."""
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return [], f"NVML unavailable ({error})"
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            gpus.append({
                "index": index, "name": name.decode() if isinstance(name, bytes) else name,
                "memory_gb": round(memory.total / 1e9, 1), "memory_free_gb": round(memory.free / 1e9, 1),
                "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                "pci_bus_id": _pci(pynvml, handle), **read_health(pynvml, handle),
            })
        return gpus, None
    finally:
        pynvml.nvmlShutdown()


def _pci(pynvml: Any, handle: Any) -> str | None:
    try:
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
        return bus.decode() if isinstance(bus, bytes) else str(bus)
    except pynvml.NVMLError:
        return None


def host_facts() -> dict[str, Any]:
    memory_gb = 0.0
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    memory_gb = round(int(line.split()[1]) * 1024 / 1e9, 1)
    except OSError:
        pass
    return {"cpus": os.cpu_count() or 1, "memory_gb": memory_gb}


def main(argv: list[str] | None = None) -> None:
    """`python -m node.inventory --probe`: what this machine's heartbeat would report of its GPUs, as JSON (run it
    where a GPU is lent to check the NVML readings for real)."""
    parser = argparse.ArgumentParser(prog="python -m node.inventory", description=main.__doc__)
    parser.add_argument("--probe", action="store_true", required=True, help="read the GPUs through NVML once")
    parser.parse_args(argv)
    gpus, reason = nvml_gpus()
    print(json.dumps({"gpu_source": reason or "nvml", "gpus": gpus, **host_facts()}, indent=2))


if __name__ == "__main__":
    main()
