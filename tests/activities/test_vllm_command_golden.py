"""Golden `vllm serve` command lines for every catalog model entry, at its defaults and with typical
overrides (regenerate with BERTH_UPDATE_GOLDEN=1 after a deliberate change)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from activities.vllm_command import rank_environment, vllm_serve_args
from catalog.entry import load_catalog
from catalog.render import render, resolve_values
from rank import GUARD_DIR
from workflows.payloads import RankSpec

GOLDEN = Path(__file__).parent / "golden" / "vllm_commands.json"
OVERRIDES: dict[str, dict[str, str]] = {
    "defaults": {},
    "small-context-two-gpus": {"MaxContextSize": "8192", "GpusPerNode": "2"},
    "two-nodes-tools-env": {"Nodes": "2", "GpusPerNode": "4",
                            "ExtraArgs": "--tool-call-parser openai --enable-auto-tool-choice",
                            "ExtraEnv": "NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5"},
}


def _model_entries() -> list[str]:
    return sorted(name for name, entry in load_catalog().items() if entry.kind == "model")


def _commands() -> dict[str, object]:
    out: dict[str, object] = {}
    for name in _model_entries():
        entry = load_catalog()[name]
        for case, raw in OVERRIDES.items():
            values = dict(raw)
            if name == "vLLM":
                values["Model"] = "hf://Qwen/Qwen3-0.6B"
            if name == "Llama 4 Scout":
                values["HfTokenSecret"] = "secret://user/hf-token"
            if entry.model is not None and "MaxContextSize" in values:
                values["MaxContextSize"] = str(min(int(values["MaxContextSize"]), entry.model.max_context))
            definition = render(entry, resolve_values(entry, values))
            replica = definition.replica
            assert replica is not None
            ranks = []
            for rank in range(replica.nodes):
                spec = RankSpec(
                    workflow_id="wf", copy_id="wf.copy-0", rank=rank, nnodes=replica.nodes,
                    engine=replica.engine, gpus_per_node=replica.gpus_per_node,
                    gpus=tuple(range(replica.gpus_per_node)), host="0.0.0.0" if replica.nodes > 1 else "10.0.0.1",
                    port=20000, master_addr="10.0.0.1", master_port=20001, model_dir="/volumes/model",
                    log_name=f"vllm-rank-{rank}",
                )
                # The guard's folder is where this checkout is: the golden file names it by a placeholder.
                env = rank_environment(spec, "copy-key")
                env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(GUARD_DIR), "<rank guard dir>")
                ranks.append({"argv": vllm_serve_args(spec), "env": env})
            out[f"{name} / {case}"] = ranks
    return out


def test_command_lines_match_golden() -> None:
    commands = _commands()
    if os.environ.get("BERTH_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(commands, indent=1, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    assert set(commands) == set(expected)
    for key, ranks in commands.items():
        assert ranks == expected[key], f"command line changed for {key}"


@pytest.mark.parametrize("name", _model_entries())
def test_served_model_name_is_the_repository(name: str) -> None:
    commands = _commands()
    for rank in commands[f"{name} / defaults"]:  # type: ignore[union-attr]
        argv = rank["argv"]  # type: ignore[index]
        served = argv[argv.index("--served-model-name") + 1]
        assert "/" in served and not served.startswith("hf://")
        assert argv[argv.index("--max-model-len") + 1].isdigit()
