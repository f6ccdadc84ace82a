"""cli/output.py draws a plain table (printable ASCII, nothing Rich reads as markup or emoji) through a pipe
exactly as Rich draws it, character for character, so that the fast paths (cli/fast/), which do not import
Rich, print what the Typer commands printed before (issue 33); and it sends every other table to Rich."""

from __future__ import annotations

import io
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from cli import output

# Words of the characters a plain cell may hold, joined by single spaces (no space at either end).
WORD = st.text(alphabet=string.ascii_letters + string.digits + "-_./,()%+=@*<>!?#$&'\"{}|~^]", min_size=1,
               max_size=12)
TEXT = st.lists(WORD, min_size=1, max_size=4).map(" ".join)
CELL = TEXT | st.sampled_from(["-", "2025-12-05 16:00"])  # none, and a time as `workflow list` shows one


def _by_rich(headings: list[str], cells: list[list[str]]) -> str:
    out = io.StringIO()
    output._rich_table(headings, cells, None, Console(file=out, width=80, force_terminal=False))
    return out.getvalue()


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=5).flatmap(
    lambda width: st.tuples(st.lists(TEXT, min_size=width, max_size=width),
                            st.lists(st.lists(CELL, min_size=width, max_size=width), max_size=4))))
def test_a_plain_table_is_drawn_as_rich_draws_it(table: tuple[list[str], list[list[str]]]) -> None:
    headings, cells = table
    assert all(map(output._plain, [*headings, *(text for row in cells for text in row)]))
    assert output._plain_table(headings, cells) == _by_rich(headings, cells)


def test_a_wide_table_is_whole_through_a_pipe() -> None:
    cells = [["x" * 150, "y"]]
    assert output._plain_table(["A", "B"], cells) == _by_rich(["A", "B"], cells)


@pytest.mark.parametrize("text", ["[bold]x[/]", "a :+1: b", "tab\there", "two\nlines", " padded", "é", "\x1b[31m"])
def test_anything_rich_would_read_otherwise_is_rich_to_draw(text: str) -> None:
    assert not output._plain(text)


@pytest.mark.parametrize(("environ", "terminal"), [
    ({}, False), ({"FORCE_COLOR": "1"}, True), ({"FORCE_COLOR": ""}, False), ({"TTY_COMPATIBLE": "1"}, True),
    ({"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}, False),
])
def test_a_terminal_is_what_rich_calls_one(environ: dict[str, str], terminal: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    stream = io.StringIO()
    assert output._is_terminal(stream) is terminal is Console(file=stream).is_terminal
