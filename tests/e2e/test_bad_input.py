"""Bad input gets one clear line, a non-zero exit, and creates nothing."""

from __future__ import annotations

from pathlib import Path

from tests.support import RunningStack, free_port_base


def _workflow_count(stack: RunningStack) -> int:
    return len(stack.cli_json("workflow", "list"))


def test_unknown_entry(sim_stack: RunningStack) -> None:
    before = _workflow_count(sim_stack)
    result = sim_stack.cli("workflow", "catalog", "start", "GPT-OSS 21B", check=False)
    assert result.returncode != 0
    assert 'No catalog entry named "GPT-OSS 21B"' in result.stderr and "GPT-OSS 20B" in result.stderr
    assert _workflow_count(sim_stack) == before


def test_malformed_values(sim_stack: RunningStack) -> None:
    result = sim_stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values", "MaxContextSize", check=False)
    assert result.returncode != 0 and "is not KEY=VALUE" in result.stderr
    result = sim_stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values", "ExtraArgs='--x", check=False)
    assert result.returncode != 0 and "unclosed" in result.stderr


def test_unknown_parameter_suggests_the_closest(sim_stack: RunningStack) -> None:
    before = _workflow_count(sim_stack)
    result = sim_stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values", "MaxContextSise=8192",
                           check=False)
    assert result.returncode != 0
    assert "no parameter 'MaxContextSise'" in result.stderr and "Did you mean MaxContextSize?" in result.stderr
    assert _workflow_count(sim_stack) == before


def test_wrong_type_and_bounds(sim_stack: RunningStack) -> None:
    result = sim_stack.cli("workflow", "catalog", "start", "GPT-OSS 20B", "--values", "Nodes=two", check=False)
    assert result.returncode != 0 and "Nodes must be a whole number" in result.stderr


def test_unknown_workflow_id(sim_stack: RunningStack) -> None:
    for command in (["workflow", "describe", "nope-123"], ["workflow", "stop", "nope-123"],
                    ["workflow", "get", "nope-123"], ["workflow", "log", "nope-123"]):
        result = sim_stack.cli(*command, check=False)
        assert result.returncode != 0, command
        assert "No workflow with ID 'nope-123'" in result.stderr, command
        assert "Traceback" not in result.stderr


def test_api_unreachable(sim_stack: RunningStack) -> None:
    env = sim_stack.env
    env["BERTH_API_URL"] = "http://127.0.0.1:9"
    result = sim_stack.cli("workflow", "list", check=False, env=env)
    assert result.returncode != 0
    assert "Cannot reach the Berth API at http://127.0.0.1:9" in result.stderr and "berth up" in result.stderr
    assert "Traceback" not in result.stderr


def test_state_dir_locked_by_a_running_stack(sim_stack: RunningStack) -> None:
    result = sim_stack.cli("up", "--state-dir", str(sim_stack.state_dir), "--port-base", str(free_port_base()),
                           check=False, timeout=60)
    assert result.returncode != 0
    assert "is in use by a running Berth stack" in result.stderr and "berth down" in result.stderr


def test_bad_simulate_spec_creates_nothing(tmp_path: Path) -> None:
    stack = RunningStack(state_dir=tmp_path / "state", port_base=free_port_base(), simulate_gpus="four-GPUs")
    result = stack.cli(*[a for a in stack.up_args() if a != "--detach"], check=False, timeout=60)
    assert result.returncode != 0 and "COUNTxSIZEGB" in result.stderr
    assert not (tmp_path / "state" / "stack.json").exists()


def test_down_without_a_stack(tmp_path: Path) -> None:
    stack = RunningStack(state_dir=tmp_path / "none", port_base=free_port_base())
    result = stack.cli("down", "--state-dir", str(tmp_path / "none"), check=False)
    assert result.returncode != 0 and "No Berth stack is running" in result.stderr
