"""Rendering for the CLI: Rich tables for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import Enum
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
errors = Console(stderr=True)


class Format(str, Enum):
    """`-o` choices."""

    TABLE = "table"
    JSON = "json"


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], title: str | None = None) -> None:
    view = Table(title=title, show_lines=False, header_style="bold")
    for _, heading in columns:
        view.add_column(heading, overflow="fold")
    for row in rows:
        view.add_row(*(_cell(row.get(key)) for key, _ in columns))
    console.print(view)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)
