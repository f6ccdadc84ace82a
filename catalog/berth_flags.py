"""The vLLM flags and variables Berth sets itself: `ExtraArgs`/`ExtraEnv` may not set them (refused at
submission, one line each), so no user value can move a copy's address, drop its API key or reshape
its parallelism behind the placement's back. (Flags that make vLLM run code: catalog/engine_flags.py.)

Matching follows how `vllm serve` (0.32) reads its command line, so no spelling slips through:
underscores for dashes (`--served_model_name`), `--flag=value`, dotted JSON keys (`--host.x 1`),
`--no-` booleans, and argparse's unique-prefix abbreviations (`--hos` is `--host`: vLLM leaves
`allow_abbrev` on). No vLLM flag is a proper prefix of an owned one (checked against the 430 option
strings of `vllm serve` 0.32), so refusing every prefix of an owned name refuses nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from berth.errors import UserInputError

_SET = "Berth sets it"
_KEY = "it would let callers around the copy's API key"
# Long name (dashes, without `--`) → why it is Berth's.
OWNED: dict[str, str] = {
    "host": f"{_SET} (the copy listens where its placement says)",
    "port": f"{_SET} (the copy listens where its placement says)",
    "uds": f"{_SET} (the copy listens where its placement says)",
    "model": f"{_SET} (the weights Model names)",
    "served-model-name": f"{_SET} (the id /v1/models lists)",
    "api-key": f"{_SET} (each copy gets its own key)",
    "config": f"{_SET}, and a config file could set any of Berth's flags; put the flags in ExtraArgs",
    "root-path": _KEY,
    "grpc": _KEY,
    "grpc-port": _KEY,
    "max-model-len": f"{_SET} from MaxContextSize; use --values MaxContextSize=N",
    "gpu-memory-utilization": f"{_SET} (the vLLM entry takes GpuMemoryUtilization)",
    "device-memory-utilization": f"{_SET} (the vLLM entry takes GpuMemoryUtilization)",
    "tensor-parallel-size": f"{_SET} from GpusPerNode",
    "pipeline-parallel-size": f"{_SET} from Nodes",
    "nnodes": f"{_SET} from Nodes",
    "node-rank": f"{_SET} for each rank",
    "master-addr": f"{_SET} for each rank",
    "master-port": f"{_SET} for each rank",
    "headless": f"{_SET} for each rank",
    "enable-expert-parallel": f"{_SET} from ExpertParallelism",
}
# Every `--data-parallel-*` flag shapes the ranks Berth places (and some open more listeners).
DATA_PARALLEL = "data-parallel"
_DATA_PARALLEL_WHY = f"{_SET} from Nodes and DataParallel"
# vLLM's short aliases of owned flags; `-n` and `-r` also take a value glued on (`-n2`).
SHORT: dict[str, str] = {
    "-tp": "tensor-parallel-size", "-pp": "pipeline-parallel-size", "-n": "nnodes", "-r": "node-rank",
    "-ep": "enable-expert-parallel", "-dp": "data-parallel-size", "-dpl": "data-parallel-size-local",
    "-dpa": "data-parallel-address", "-dpp": "data-parallel-rpc-port", "-dpr": "data-parallel-start-rank",
    "-dpb": "data-parallel-backend", "-dpe": "data-parallel-external-lb", "-dph": "data-parallel-hybrid-lb",
    "-dpm": "data-parallel-multi-port-external-lb", "-dpn": "data-parallel-rank",
}
# vLLM reads these from the environment: the key Berth gives each copy, and a frontend that gets its
# settings (the key among them) another way.
OWNED_ENV: dict[str, str] = {
    "VLLM_API_KEY": "Berth sets it (each copy gets its own key)",
    "VLLM_USE_RUST_FRONTEND": "it would let callers around the copy's API key",
}


def _long_name(token: str) -> str:
    """`--Served_Model_Name.x+=v` → `served-model-name` (the name vLLM's parser resolves)."""
    name = token[2:].split("=", 1)[0].split(".", 1)[0].rstrip("+").replace("_", "-").lower()
    return name[3:] if name.startswith("no-") else name


def _why_long(name: str) -> tuple[str, str] | None:
    """(the owned flag, why) when `name` is an owned flag or an abbreviation argparse expands to one."""
    if not name:
        return None
    if name.startswith(DATA_PARALLEL):
        return name, _DATA_PARALLEL_WHY
    for owned, why in OWNED.items():
        if owned.startswith(name):
            return owned, why
    if DATA_PARALLEL.startswith(name):
        return DATA_PARALLEL + "-*", _DATA_PARALLEL_WHY
    return None


def _why_short(token: str) -> tuple[str, str] | None:
    name = token.split("=", 1)[0].split(".", 1)[0]
    if len(name) < 2:
        return None  # a lone `-` is a positional to argparse
    for short, long in SHORT.items():
        # Exact, an abbreviation (`-t` is `-tp`), or a one-letter alias with its value glued on (`-n2`).
        if short.startswith(name) or (len(short) == 2 and name.startswith(short)):
            why = _DATA_PARALLEL_WHY if long.startswith(DATA_PARALLEL) else OWNED[long]
            return long, why
    return None


def extra_args_refusal(tokens: Iterable[str]) -> str | None:
    """Why ExtraArgs may not hold these words (the first that sets a flag Berth owns), or None. The model
    is Berth's first positional: a second one makes vLLM refuse to start, so positionals pass here."""
    for token in tokens:
        if token == "--":
            return "ExtraArgs may not contain a bare `--`: every ExtraArgs word must be a vLLM flag or its value."
        if token.startswith("--"):
            found = _why_long(_long_name(token))
        elif token.startswith("-"):
            found = _why_short(token)
        else:
            continue
        if found:
            written, flag = token.split("=", 1)[0], f"--{found[0]}"
            shown = flag if written == flag else f"{written} (vLLM reads it as {flag})"
            return f"ExtraArgs may not set {shown}: {found[1]}."
    return None


def check_extra_args(tokens: Iterable[str]) -> None:
    refusal = extra_args_refusal(tokens)
    if refusal:
        raise UserInputError(refusal)


def check_extra_env(names: Mapping[str, str] | Iterable[str]) -> None:
    """Refuse a variable through which vLLM would take its API key from the user."""
    for name in names:
        why = OWNED_ENV.get(name.upper())
        if why:
            raise UserInputError(f"ExtraEnv may not set {name}: {why}.")
