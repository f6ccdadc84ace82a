"""Issue 11, item 1: any user became an administrator through ExtraEnv. A rank inherited the node agent's
whole environment (the admin BERTH_TOKEN, BERTH_STATE_DIR with the keys), and ExtraEnv took any name, so
`PYTHONWARNINGS=all:0:antigravity.x:0:0 BROWSER=perlthanks PERL5OPT=…` ran a payload at engine start that
wrote the token out. Now: such names, and ExtraArgs flags that run code, are refused at submission in one
line with nothing started; a started rank holds no Berth credential or key path, runs as the rank user and
cannot see the keys; neither does Temporal hold a Berth secret."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from berth.settings import StateLayout
from tests.security.conftest import People
from tests.support import process_environment, rank_record, runs_as_the_rank_user_seeing_no_key, wait_for

MODEL = "GPT-OSS 20B"
PAYLOAD = "PYTHONWARNINGS=all:0:antigravity.x:0:0 BROWSER=perlthanks PERL5OPT=-Mbigint"


def _refused(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return str(lines[0])


def _workflows(people: People, person: str) -> set[str]:
    response = people.api(person, "GET", "/v1/workflows")
    assert response.status_code == 200, response.text
    return {row["id"] for row in response.json()}


def _rank_dirs(people: People) -> set[str]:
    return {path.name for path in (people.stack.state_dir / "nodes").glob("*/ranks/*")}


@pytest.mark.parametrize(("extra_env", "refused_name"), [
    (PAYLOAD, "PYTHONWARNINGS"),
    ("BROWSER=perlthanks", "BROWSER"),
    ("PERL5OPT=-Mbigint", "PERL5OPT"),
    ("NCCL_SOCKET_IFNAME=lo LD_PRELOAD=/tmp/payload.so", "LD_PRELOAD"),
    ("BERTH_TOKEN=stolen", "BERTH_TOKEN"),
    ("HF_TOKEN=hf_x", "HF_TOKEN"),
    ("VLLM_LOGGING_CONFIG_PATH=/tmp/config.json", "VLLM_LOGGING_CONFIG_PATH"),
])
def test_dangerous_extra_env_is_refused_at_submission(people: People, extra_env: str, refused_name: str) -> None:
    before, ranks = _workflows(people, "bob"), _rank_dirs(people)
    line = _refused(people.cli("bob", "workflow", "catalog", "start", MODEL, "--values",
                               f"Proxy=false,ExtraEnv='{extra_env}'"))
    assert f"ExtraEnv may not set {refused_name}:" in line
    direct = people.api("bob", "POST", "/v1/workflows",
                        json={"entry": MODEL, "values": {"Proxy": "false", "ExtraEnv": extra_env}})
    assert direct.status_code == 400 and refused_name in direct.text
    assert _workflows(people, "bob") == before and _rank_dirs(people) == ranks  # nothing started


@pytest.mark.parametrize("flag", ["--trust-remote-code", "--trust_remote_code", "--trust-remote-code=true",
                                  "--trust-remote", "--tool-parser-plugin=/tmp/plugin.py"])
def test_code_running_extra_args_are_refused_at_submission(people: People, flag: str) -> None:
    before = _workflows(people, "bob")
    line = _refused(people.cli("bob", "workflow", "catalog", "start", MODEL, "--values",
                               f"Proxy=false,ExtraArgs='--enforce-eager {flag}'"))
    assert f"ExtraArgs may not carry {flag}:" in line and "BERTH_ALLOW_TRUST_REMOTE_CODE" in line
    direct = people.api("bob", "POST", "/v1/workflows",
                        json={"entry": MODEL, "values": {"Proxy": "false", "ExtraArgs": flag}})
    assert direct.status_code == 400 and "BERTH_ALLOW_TRUST_REMOTE_CODE" in direct.text
    assert _workflows(people, "bob") == before


def _leaks(environment: dict[str, str], people: People) -> list[str]:
    """What in `environment` would hand its process a control-plane credential or the keys."""
    stack = people.stack
    secrets = {stack.token, str(StateLayout(stack.state_dir).keys), str(stack.state_dir / "client.json")}
    found = [name for name in environment
             if name.startswith("BERTH_") and not name.startswith("BERTH_SIM_")]
    found += [name for name, value in environment.items() if any(s in value for s in secrets)]
    return found


def test_a_started_rank_holds_no_credential_and_gets_its_allowed_extra_env(people: People) -> None:
    result = people.cli("bob", "workflow", "catalog", "start", MODEL, "--values",
                        "Proxy=false,ExtraEnv='VLLM_LOGGING_LEVEL=INFO NCCL_SOCKET_IFNAME=lo'", check=True)
    workflow_id = result.stdout.strip().splitlines()[0]
    try:
        info: dict[str, Any] = wait_for(
            lambda: (d := people.api("bob", "GET", f"/v1/workflows/{workflow_id}").json()).get("phase") == "ready"
            and d, 240, f"{workflow_id} ready")
        copy_id = str(info["replicas"][0]["copy_id"])
        rank = rank_record(people.stack.state_dir, copy_id, 0)
        environment = process_environment(int(rank["pid"]))
        assert environment["VLLM_LOGGING_LEVEL"] == "INFO" and environment["NCCL_SOCKET_IFNAME"] == "lo"
        assert "PATH" in environment and "CUDA_VISIBLE_DEVICES" in environment
        assert _leaks(environment, people) == []
        # The node agent it runs under does hold the admin token: the rank got it no longer.
        agent = process_environment(_parent(int(rank["pid"])))
        assert agent.get("BERTH_TOKEN") == people.stack.token
        runs_as_the_rank_user_seeing_no_key(int(rank["pid"]), people.stack.state_dir)
    finally:
        people.cli("bob", "workflow", "stop", workflow_id)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_the_temporal_dev_server_holds_no_berth_secret(people: People) -> None:
    pid = next(int(c["pid"]) for c in people.stack.info["children"] if c["name"] == "temporal")
    group = [int(p) for p in os.listdir("/proc") if p.isdigit() and _same_group(int(p), pid)]
    assert pid in group
    for member in group:
        environment = process_environment(member)
        assert "PATH" in environment
        assert _leaks(environment, people) == [], member


def _same_group(pid: int, group: int) -> bool:
    try:
        return os.getpgid(pid) == group
    except OSError:
        return False
