"""Issue 29, finding 8: `berth apply` expanded a YAML alias bomb (1.29 GB in 40 s, then `diff` said `+ create`).
Every YAML a user hands Berth — apply files, --values-file, a limits file, the rendered workflow, the catalog's
entries — is read by one loader (berth/bounded_parse.py) that refuses anchors and aliases and nesting past 64
levels, in one line naming the file and the line, before anything is expanded or sent."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.bounded_parse import TooDeep
from berth.errors import UserInputError
from berth.settings import read_limit_policy
from catalog.values import load_values_file
from cli.app import app
from cli.apply_plan import parse_documents

ALIASES = "YAML anchors and aliases (&name, *name, <<: *name) are not accepted in"


def _bomb(levels: int) -> str:
    """The billion laughs: each level nine aliases of the one before (9 ** levels strings once expanded)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "name: laughs\nentry: SmolLM2 135M Instruct\nvalues:\n" + "".join(f"  {line}\n" for line in lines)


def test_an_apply_file_with_an_alias_bomb_is_refused_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(UserInputError) as refused:
        parse_documents(_bomb(9))
    assert str(refused.value) == f"{ALIASES} the file (line 4); write each value out."
    assert time.monotonic() - started < 1.0


def test_berth_diff_refuses_the_bomb_in_one_line_without_calling_the_api(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(_bomb(6))
    started = time.monotonic()
    # An API that is not there: a refusal that came after a call would say so instead.
    result = CliRunner().invoke(app, ["diff", "-f", str(path)],
                                env={"COLUMNS": "400", "BERTH_API_URL": "http://127.0.0.1:1", "BERTH_TOKEN": "t"})
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: {path}: {ALIASES} the file (line 4); write each value out."]
    assert time.monotonic() - started < 5.0


def test_deep_yaml_is_refused_in_one_line_not_a_recursion_error() -> None:
    with pytest.raises(TooDeep, match="^the file nests YAML deeper than 64 levels \\(line 4\\)\\.$"):
        parse_documents("name: deep\nentry: x\nvalues:\n  a: " + "[" * 100_000 + "]" * 100_000 + "\n")


def test_a_values_file_and_a_limits_file_refuse_aliases(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("MaxContextSize: &n 4096\nNodes: *n\n")
    with pytest.raises(UserInputError, match=re.escape(f"{ALIASES} --values-file {values} (line 1)")):
        load_values_file(values)
    limits = tmp_path / "limits.yaml"
    limits.write_text("requests_per_minute: &r {user: 60}\ntokens_per_minute: *r\n")
    with pytest.raises(UserInputError) as refused:
        read_limit_policy(limits, f"--limits {limits}")
    assert str(refused.value) == f"{ALIASES} --limits {limits} (line 1); write each value out."
    deep = tmp_path / "limits.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TooDeep, match="nests JSON deeper than 64 levels"):
        read_limit_policy(deep, f"--limits {deep}")
