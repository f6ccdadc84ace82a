"""The split CLI prints, for every command, exactly the help that the one-module CLI printed.

`help_before_split.json` was recorded from main before the split, one real `python -P -m cli PATH --help`
process per command at COLUMNS=120; it pins commands, options, defaults, help texts and their order.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BEFORE: dict[str, str] = json.loads((Path(__file__).parent / "help_before_split.json").read_text())
# Command groups added since the split, each by the change that needed it: pinned by their own tests, and
# their one line in `berth --help` is the only change to the help recorded before.
ADDED = ("berth key",  # API keys (issue 15)
         "berth endpoint policy",  # an endpoint's limits override and key TTL cap (issue 15)
         "berth model",  # the model registry (issue 16)
         "berth apply", "berth diff",  # declarative apply (issue 17)
         # Revisions and rollouts (issue 17).
         "berth workflow update", "berth workflow revisions", "berth workflow drain", "berth workflow rollout",
         "berth workflow explain-scaling",  # the autoscaler's last decision and why (issue 17)
         "berth console",  # the web console's URL and a sign-in token (issue 18)
         "berth top",  # a live table of the endpoints' figures from the proxy's /metrics (issue 19)
         "berth endpoint tokens", "berth endpoint revoke-token",  # endpoint tokens one by one (issue 31, item 10)
         "berth capacity",  # free GPUs per node and GPU model, and which entries fit now (issue 34)
         "berth explain",  # why a workflow's copies are placed or scaled as they are (issue 34)
         "berth admin",  # backup and restore of the control plane (issue 34)
         "berth events",  # the cluster's event stream (issue 34)
         "berth policy",  # policies and quotas per user, group and organization (issue 34)
         "berth usage",  # GPU-hours, requests and tokens by key and period, and budgets (issue 34)
         "berth node mig")  # MIG slices of a node's H100s (issue 36)
# Options added since to commands that were there, each with the change that needed it: their lines in the
# command's help are the only change to it (pinned in tests/cli/test_rollout_cli.py).
ADDED_OPTIONS = {"berth workflow get": ("--revision",), "berth node drain": ("--grace-seconds",),  # issue 17
                 "berth workflow catalog start": ("--name",),  # a chosen workflow ID (issue 17)
                 "berth catalog start": ("--name",),
                 # The node agent's loopback /metrics (issue 19); its site and failure domain (issue 36).
                 "berth node": ("--metrics-port", "--site", "--failure-domain"),
                 "berth endpoint generate-token": ("--note",)}  # shown by `berth endpoint tokens` (issue 31)


def _before_additions(after: dict[str, str]) -> dict[str, str]:
    """The help texts less the added commands, and their parents' help less their lines."""
    # A command or one under it: `berth admin` is added, `berth admin-token` was there before.
    kept = {path: text for path, text in after.items()
            if not any(path == added or path.startswith(f"{added} ") for added in ADDED)}
    for added in ADDED:
        parent, name = added.rsplit(" ", 1)
        if parent in kept:
            kept[parent] = "".join(line for line in kept[parent].splitlines(keepends=True)
                                   if not line.startswith(f"│ {name} "))
    for path, options in ADDED_OPTIONS.items():
        if path in kept:
            kept[path] = _squeezed("".join(line for line in kept[path].splitlines(keepends=True)
                                           if not line.lstrip("│ ").startswith(options)))
    return kept


def _squeezed(text: str) -> str:
    """The text with runs of blanks as one: a wider option column realigns the lines around it."""
    return "\n".join(re.sub(r"\s+", " ", line).strip() for line in text.splitlines())


def _before(path: str) -> str:
    return _squeezed(BEFORE[path]) if path in ADDED_OPTIONS else BEFORE[path]


# A parent whose added command has a longer name than its others widens the name column: its other lines
# keep their words and order, only the padding between name and help moves.
PARENTS = frozenset(added.rsplit(" ", 1)[0] for added in ADDED)


def _padding_free(text: str) -> str:
    return re.sub(r" {2,}", "  ", text)


def _same(path: str, after: str) -> bool:
    before = _before(path)
    return after == before or (path in PARENTS and _padding_free(after) == _padding_free(before))


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
    after = _before_additions(json.loads(_run("-m", "tests.cli.help_texts")))
    assert list(after) == list(BEFORE)  # the same commands, listed in the same order
    changed = [path for path in BEFORE if not _same(path, after[path])]
    assert not changed, f"help changed for {changed}; first:\n{after[changed[0]]}\nwas:\n{_before(changed[0])}"


@pytest.mark.parametrize("path", ["berth", "berth workflow", "berth up", "berth workflow catalog start",
                                  "berth node", "berth token revoke", "berth gateway"])
def test_the_in_process_rendering_is_what_the_real_command_prints(path: str) -> None:
    # The test above renders every help in one process; this pins that rendering to the real thing.
    printed = _run("-m", "cli", *path.split()[1:], "--help")
    assert _same(path, _before_additions({path: printed})[path])
