"""The split CLI prints, for every command, exactly the help that the one-module CLI printed.

`help_before_split.json` was recorded from main before the split, one real `python -P -m cli PATH --help`
process per command at COLUMNS=120; it pins commands, options, defaults, help texts and their order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BEFORE: dict[str, str] = json.loads((Path(__file__).parent / "help_before_split.json").read_text())


def _env() -> dict[str, str]:
    # Rich reads the width from COLUMNS; colours and a forced terminal would change the bytes.
    env = {name: value for name, value in os.environ.items()
           if name not in ("FORCE_COLOR", "NO_COLOR", "TERMINAL_WIDTH", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    return {**env, "COLUMNS": "120", "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(REPO)}


def _run(*argv: str) -> str:
    result = subprocess.run([sys.executable, "-P", *argv], capture_output=True, text=True, timeout=120,
                            env=_env(), cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def test_every_command_prints_the_help_it_printed_before_the_split() -> None:
    after: dict[str, str] = json.loads(_run("-m", "tests.cli.help_texts"))
    assert list(after) == list(BEFORE)  # the same commands, listed in the same order
    changed = [path for path in BEFORE if after[path] != BEFORE[path]]
    assert not changed, f"help changed for {changed}; first:\n{after[changed[0]]}\nwas:\n{BEFORE[changed[0]]}"


@pytest.mark.parametrize("path", ["berth", "berth workflow", "berth up", "berth workflow catalog start",
                                  "berth node", "berth token revoke", "berth gateway"])
def test_the_in_process_rendering_is_what_the_real_command_prints(path: str) -> None:
    # The test above renders every help in one process; this pins that rendering to the real thing.
    assert _run("-m", "cli", *path.split()[1:], "--help") == BEFORE[path]
