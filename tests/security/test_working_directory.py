"""Issue 11, item 5: `berth up` typed in a folder that holds `cli/`, `server/`, `node/`, … (a project of the
user's, another checkout of Berth) runs the installed Berth and nothing from that folder: every component,
the detached supervisor, the engine simulator's ranks and LiteLLM start with the working directory off
sys.path and a working directory of Berth's own."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from berth.processes import without_relative_python_path
from tests.support import REPO, RunningStack, free_port_base, rank_record, service_record, wait_for

# Berth's own top-level packages, and a few of the libraries its processes import first.
SHADOWED = ("cli", "server", "control", "node", "gateway", "simulator", "workflows", "berth", "activities", "catalog",
            "litellm", "uvicorn", "temporalio")
RUNNABLE = ("cli", "simulator")  # `python -m NAME` would run NAME/__main__.py
MODEL = "openai/gpt-oss-20b"


def _hostile_project(root: Path, markers: Path) -> None:
    """Packages named like Berth's that leave a marker file when imported (and, run as `python -m`, fail
    with status 3 as the issue saw)."""
    leave_marker = (f"import pathlib, sys\n"
                    f"pathlib.Path({str(markers)!r}, __name__ + '-' + str(__import__('os').getpid()))"
                    f".write_text(' '.join(sys.argv))\n")
    for name in SHADOWED:
        package = root / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(leave_marker)
        if name in RUNNABLE:
            (package / "__main__.py").write_text(leave_marker + "raise SystemExit(3)\n")


@pytest.fixture(scope="module")
def stack_from_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningStack, Path, Path]]:
    base = Path(tmp_path_factory.mktemp("working-directory"))
    project, markers = base / "project", base / "markers"
    markers.mkdir()
    _hostile_project(project, markers)
    stack = RunningStack(state_dir=base / "state", port_base=free_port_base(), nodes=1, simulate_gpus="4x80GB",
                         cwd=project)
    env = stack.env
    env["BERTH_CONFIG"] = str(stack.state_dir / "user-config.json")
    if (REPO / ".venv-litellm" / "bin" / "litellm").exists():
        # Found beside the Berth install, as a user's stack finds it, not through the test's override.
        env.pop("BERTH_LITELLM_BIN", None)
    # A relative state dir: it resolves against where `berth up` was typed, and only there.
    stack.cli("up", "--detach", "--state-dir", "../state", "--port-base", str(stack.port_base), "--nodes", "1",
              "--simulate-gpus", "4x80GB", env=env, timeout=240)
    stack.info = json.loads((stack.state_dir / "stack.json").read_text())
    try:
        yield stack, project, markers
    finally:
        stack.stop()


def _chat(endpoint: dict[str, str], token: str) -> str:
    response = httpx.post(endpoint["url"] + "/v1/chat/completions", timeout=60,
                          headers={"Authorization": f"Bearer {token}"},
                          json={"model": MODEL, "max_tokens": 16,
                                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def _working_directory(pid: int) -> Path:
    return Path(os.readlink(f"/proc/{pid}/cwd"))


@pytest.mark.litellm
def test_stack_started_in_a_project_folder_runs_only_berth(
        stack_from_project: tuple[RunningStack, Path, Path]) -> None:
    stack, project, markers = stack_from_project
    assert stack.info["state_dir"] == str(stack.state_dir.resolve())
    behind_litellm = stack.start_entry("GPT-OSS 20B", watch=False)  # Proxy=true: LiteLLM in front
    direct = stack.start_entry("GPT-OSS 20B", "Proxy=false", watch=False)
    for workflow_id in (behind_litellm, direct):
        stack.wait_phase(workflow_id, {"ready"}, timeout=240)
        endpoint = stack.endpoint(workflow_id)
        assert "Paris" in _chat(endpoint, stack.token_for(endpoint["id"]))
    assert sorted(path.name for path in markers.iterdir()) == []
    # Every process the stack started works in a folder of Berth's, never where `berth up` was typed.
    copy_id = stack.describe(direct)["replicas"][0]["copy_id"]
    pids = [stack.info["pid"], *(child["pid"] for child in stack.info["children"]),
            rank_record(stack.state_dir, copy_id, 0)["pid"], service_record(stack.state_dir, behind_litellm)["pid"]]
    assert [pid for pid in pids if _working_directory(pid) == project] == []
    stack.cli("workflow", "stop", behind_litellm)
    stack.cli("workflow", "stop", direct)
    wait_for(lambda: not list((stack.state_dir / "nodes").glob("*/ranks/*/rank.json")), 60, "ranks to stop")
    assert sorted(path.name for path in markers.iterdir()) == []


@pytest.mark.parametrize(("python_path", "kept", "dropped"), [
    ("/opt/berth:", "/opt/berth", [""]),  # `PYTHONPATH=$PYTHONPATH:/x` with nothing set before, reversed
    (":/opt/berth", "/opt/berth", [""]),
    ("./lib:/opt/a:src", "/opt/a", ["./lib", "src"]),
    (".", None, ["."]),
    ("", None, []),  # set but empty: Python adds nothing for it either
])
def test_relative_python_path_entries_never_reach_a_component(python_path: str, kept: str | None,
                                                              dropped: list[str]) -> None:
    cleaned, removed = without_relative_python_path({"PYTHONPATH": python_path, "HOME": "/home/u"})
    assert cleaned.get("PYTHONPATH") == kept and cleaned["HOME"] == "/home/u"
    assert removed == dropped
