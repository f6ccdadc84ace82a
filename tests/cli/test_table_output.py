"""Issue 31, item 11: piped and narrow tables. Through a pipe or into a file every row comes whole at its
natural width (as kubectl prints it), whatever COLUMNS says; on a narrow terminal cells fold between words,
never inside one (`simulato`/`r`, copy ids over three lines before)."""

from __future__ import annotations

import io

from rich.console import Console

from cli import output

ROWS = [{"id": "node-1", "kind": "simulator", "copies": "pool-12345678.copy-0, pool-12345678.copy-1, "
         "pool-12345678.copy-2", "gpus": "4x80GB"}]
COLUMNS = [("id", "NODE"), ("kind", "KIND"), ("copies", "COPIES"), ("gpus", "GPUS")]
WORDS = ["node-1", "simulator", "pool-12345678.copy-0,", "pool-12345678.copy-1,", "pool-12345678.copy-2", "4x80GB"]


def _printed(terminal: bool, width: int) -> str:
    out = io.StringIO()
    output.table(ROWS, COLUMNS, console=Console(file=out, width=width, force_terminal=terminal, color_system=None))
    return out.getvalue()


def test_a_piped_table_prints_each_row_whole() -> None:
    printed = _printed(terminal=False, width=80)
    [row] = [line for line in printed.splitlines() if "node-1" in line]
    assert all(word in row for word in WORDS), row  # one line holds the whole row


def test_a_narrow_terminal_folds_between_words_only() -> None:
    printed = _printed(terminal=True, width=70)
    cells = " ".join(line.replace("│", " ") for line in printed.splitlines())
    assert all(word in cells.split() for word in WORDS), printed  # every word whole on some line
    assert max(len(line) for line in printed.splitlines()) <= 70
