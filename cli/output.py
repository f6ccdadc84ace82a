"""What a command prints, without importing Rich until it must: JSON for scripts, tables for people, and the
one-line error. Both the Typer commands (through cli/common.py) and the fast paths (cli/fast/) print here, so a
fast path's output is the normal path's byte for byte (issue 33: Rich's import is 30-50 ms of CPU of a start
whose goal is 150 ms).

A table goes through a pipe or into a file at its natural width, drawn by `_plain_table` when every text in it
is plain (printable ASCII that Rich's markup and emoji codes leave alone): that is the drawing Rich makes of such a
table, character for character (tests/cli/test_output.py compares them). Anything else (a terminal, to fit
its width; a title; a text Rich would read as markup) is drawn by Rich, as before."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from enum import Enum
from itertools import chain
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

MAX_UNBROKEN_WORD = 48  # a table cell's word longer than this may be folded on a terminal
NATURAL_WIDTH_CAP = 10_000  # a piped table's widest row: no real listing comes near it
# What Rich would read as an emoji code (rich/_emoji_replace.py's pattern, loosened to any two colons with no
# space between) or as markup (`[`): a text with either is Rich's to draw.
_RICH_SYNTAX = re.compile(r":\S*:|\[")
_PRINTABLE_ASCII = re.compile(r"[ -~]*")


class Format(str, Enum):
    """`-o` choices."""

    TABLE = "table"
    JSON = "json"


def write_json(data: Any) -> None:
    """Print JSON-ready data (lists, dicts, strings, numbers) as the listings' `-o json` does."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_error(message: str) -> None:
    """The one line every refusal ends in, on stderr: `error: <message>`."""
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)


def cell(value: Any) -> str:
    """A value as a table cell shows it: `-` for none, yes/no, a list joined by commas."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], title: str | None = None,
          console: Console | None = None) -> None:
    """Through a pipe or into a file: every row whole, at its natural width (as kubectl prints), so that a
    script's `grep` and `awk` see whole cells. On a terminal: fitted to its width, folding between words;
    a word is broken only when it alone is wider than the terminal (issue 31: `simulato`/`r`). `console`: where
    to draw (a test's terminal of a given width), stdout by default."""
    cells = [[cell(row.get(key)) for key, _ in columns] for row in rows]
    headings = [heading for _, heading in columns]
    terminal = console.is_terminal if console is not None else _is_terminal(sys.stdout)
    if title is None and not terminal and all(map(_plain, chain(headings, *cells))):
        (console.file if console is not None else sys.stdout).write(_plain_table(headings, cells))
    else:
        _rich_table(headings, cells, title, console)


def _is_terminal(stream: IO[str]) -> bool:
    """Rich's answer (rich.console.Console.is_terminal) for a stream: TTY_COMPATIBLE, FORCE_COLOR, then isatty. A
    case it answers otherwise (Jupyter, IDLE) only sends a table to Rich, which decides for itself."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return stream.isatty()
    except ValueError:  # a closed stream, as Rich handles it
        return False


def _plain(text: str) -> bool:
    """Printable ASCII, one line, no leading or trailing space, nothing Rich would read as markup or emoji."""
    return (_PRINTABLE_ASCII.fullmatch(text) is not None and text == text.strip()
            and _RICH_SYNTAX.search(text) is None)


def _plain_table(headings: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    """Rich's default table (box.HEAVY_HEAD, one space of padding) at its natural width, without styles."""
    widths = [max([len(heading), *(len(line[index]) for line in cells)]) for index, heading in enumerate(headings)]

    def rule(left: str, line: str, middle: str, right: str) -> str:
        return left + middle.join(line * (width + 2) for width in widths) + right + "\n"

    def row(edge: str, texts: Sequence[str]) -> str:
        padded = (f" {text.ljust(width)} " for text, width in zip(texts, widths, strict=True))
        return edge + edge.join(padded) + edge + "\n"

    body = "".join(row("│", line) for line in cells)
    return rule("┏", "━", "┳", "┓") + row("┃", headings) + rule("┡", "━", "╇", "┩") + body + rule("└", "─", "┴", "┘")


def _rich_table(headings: Sequence[str], cells: Sequence[Sequence[str]], title: str | None,
                console: Console | None) -> None:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    console = console or Console()
    view = Table(title=title, show_lines=False, header_style="bold")
    for index, heading in enumerate(headings):
        longest = max([len(word) for line in cells for word in line[index].split()] + [len(heading)])
        view.add_column(heading, overflow="fold", min_width=min(longest, MAX_UNBROKEN_WORD),
                        no_wrap=not console.is_terminal)
    for line in cells:
        view.add_row(*line)
    if console.is_terminal:
        console.print(view)
    else:
        natural = Measurement.get(console, console.options.update_width(NATURAL_WIDTH_CAP), view).maximum
        Console(file=console.file, width=max(console.width, natural), color_system=None).print(view)
