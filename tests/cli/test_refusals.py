"""The refusals a command makes before it calls anything: the same one line on stderr and exit 1 after the
split as before it (the lines below are what main printed), the component settings included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNSET = "`berth up` sets it; for a multi-host setup see docs/operations.md."

REFUSALS = [
    (["worker"], {}, f"BERTH_STATE_DIR is not set. {UNSET}"),
    (["server"], {}, f"BERTH_STATE_DIR is not set. {UNSET}"),
    (["proxy"], {}, f"BERTH_API_URL is not set. {UNSET}"),
    (["proxy"], {"BERTH_API_URL": "http://127.0.0.1:9"}, f"BERTH_TOKEN is not set. {UNSET}"),
    (["hf-mirror", "--dir", "."], {}, f"BERTH_STATE_DIR is not set. {UNSET}"),
    (["node", "--id", "x"], {}, f"BERTH_STATE_DIR is not set. {UNSET}"),
    (["node", "--engine", "bogus"], {}, "--engine must be one of vllm, vllm-cpu, simulator, not 'bogus'."),
    (["gateway"], {"BERTH_GATEWAY_MASTER_KEY": "k"},
     "BERTH_GATEWAY_MASTER_KEY needs --endpoint-id (the gateway's endpoint, which its callers' assertions name)."),
    (["gateway"], {}, f"BERTH_API_URL is not set. {UNSET}"),
    (["login"], {}, "Give exactly one of --token T or --user NAME."),
    (["token", "revoke"], {}, "Give exactly one of a token ID or --all [--user NAME]."),
    (["token", "revoke", "abc", "--user", "bob"], {}, "--user goes with --all; a token ID names its user already."),
    (["endpoint", "opencode-config", "e1", "--provider", "a/b"], {},
     "--provider 'a/b' must be a plain name such as berth (it prefixes model ids)."),
]


@pytest.mark.parametrize(("argv", "extra_env", "line"), REFUSALS, ids=lambda value: str(value))
def test_refused_with_one_line_and_exit_1(argv: list[str], extra_env: dict[str, str], line: str,
                                          tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("BERTH_")}
    env.update(extra_env, COLUMNS="120", PYTHONPATH=str(REPO), BERTH_CONFIG=str(tmp_path / "client.json"))
    result = subprocess.run([sys.executable, "-P", "-m", "cli", *argv], capture_output=True, text=True,
                            timeout=60, env=env, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", f"error: {line}\n")
